# The layers of include/shardgraph/ (docs/architecture.md): run as `cmake -DSOURCE_DIR=<repo> -P`.
# Fails, naming each offending include, when
#   - a header of the compile-time and value layers (core, mesh, ir, dsl, passes, program, models,
#     io) includes anything from runtime/, which sits above them;
#   - any header of the core includes a backend's header or its dependency (Eigen, MPI, CUDA, NCCL,
#     Kokkos): backends depend on the core, never the reverse;
#   - a header outside text/ includes text/ or PCRE2: only programs that link shardgraph::text
#     (the tokenizers) need PCRE2.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "shardgraph: layering_test: SOURCE_DIR is not set. run cmake -DSOURCE_DIR=<repo> -P ...")
endif()
set(include_dir "${SOURCE_DIR}/include/shardgraph")
set(include_line "^[ \t]*#[ \t]*include[ \t]*[<\"]")
set(problems)

foreach(layer core mesh ir dsl passes program models io)
  file(GLOB_RECURSE headers "${include_dir}/${layer}/*.hpp")
  foreach(header IN LISTS headers)
    file(STRINGS "${header}" lines REGEX "${include_line}shardgraph/runtime/")
    foreach(line IN LISTS lines)
      file(RELATIVE_PATH where "${SOURCE_DIR}" "${header}")
      list(APPEND problems "${where}: ${line}  (${layer}/ sits below runtime/)")
    endforeach()
  endforeach()
endforeach()

file(GLOB_RECURSE headers "${include_dir}/*.hpp")
foreach(header IN LISTS headers)
  file(STRINGS "${header}" lines
       REGEX "${include_line}(shardgraph/(cpu|threads|mpi|cuda|nccl|kokkos)[/.]|Eigen/|mpi\\.h|cuda|nccl\\.h|Kokkos)")
  foreach(line IN LISTS lines)
    file(RELATIVE_PATH where "${SOURCE_DIR}" "${header}")
    list(APPEND problems "${where}: ${line}  (the core includes no backend)")
  endforeach()
endforeach()

foreach(header IN LISTS headers)
  if(header MATCHES "^${include_dir}/text/")
    continue()
  endif()
  file(STRINGS "${header}" lines REGEX "${include_line}(shardgraph/text/|pcre2\\.h)")
  foreach(line IN LISTS lines)
    file(RELATIVE_PATH where "${SOURCE_DIR}" "${header}")
    list(APPEND problems "${where}: ${line}  (text/ needs PCRE2, which only shardgraph::text links)")
  endforeach()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "shardgraph: layering: a header includes a layer above its own:\n  ${text}\n"
                      "Move the value it needs down into core/ or mesh/, or the code up into its caller.")
endif()
message(STATUS "layering: every layer includes only the layers below it")
