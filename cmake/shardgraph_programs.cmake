# Examples and benches: one executable each, built with the project's warning policy.
#
#   shardgraph_add_example(<name> SOURCES <files...> LINK <targets...> [MAX_NODES <n>])
#   shardgraph_add_bench(<name> SOURCES <files...> LINK <targets...> [MAX_NODES <n>])
#
# The target is example_<name> / bench_<name>; the program is called <name> and lands in the build
# folder of examples/ or bench/. A program that links a backend not built here is skipped with a
# configure message. One that links shardgraph::cpu gets the cpu kernels from shardgraph::cpu_separate,
# compiled once for all of them (they do not read the graph's capacity). MAX_NODES: the graph
# capacity (SHARDGRAPH_MAX_NODES) of the program's units.
include(shardgraph_warnings)

function(_shardgraph_add_program kind name)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "MAX_NODES" "SOURCES;LINK")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "shardgraph: shardgraph_add_${kind}(${name}): expected SOURCES <files...> "
                        "[LINK <targets...>] [MAX_NODES n], got '${arg_UNPARSED_ARGUMENTS}'. fix the call")
  endif()
  shardgraph_skip_without_backends(skip "${kind} '${name}'" ${arg_LINK})
  if(skip)
    return()
  endif()
  set(target ${kind}_${name})
  add_executable(${target} ${arg_SOURCES})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name})
  target_link_libraries(${target} PRIVATE ${arg_LINK})
  if("shardgraph::cpu" IN_LIST arg_LINK)  # its kernels from their own library (cpu/separate_kernels.hpp)
    target_link_libraries(${target} PRIVATE shardgraph::cpu_separate)
  endif()
  if(arg_MAX_NODES)
    target_compile_definitions(${target} PRIVATE SHARDGRAPH_MAX_NODES=${arg_MAX_NODES})
  endif()
  shardgraph_target_warnings(${target})
endfunction()

function(shardgraph_add_example name)
  _shardgraph_add_program(example ${name} ${ARGN})
endfunction()

function(shardgraph_add_bench name)
  _shardgraph_add_program(bench ${name} ${ARGN})
endfunction()
