# Every complete C++ snippet of the documentation compiles, in the default build.
#
#   shardgraph_add_doc_snippets(<markdown files...>)
#     At configure time, each ```cpp block of each file that is complete is written to
#     <build>/doc_snippets/<file>_<n>.cpp (the file's path from the repository root, '/' and '.'
#     as '_', n counting its complete snippets from 1) and built as the executable doc_snippet_<file>_<n>.
#     A block is complete when it holds `int main`, or when the line before its fence is
#     `<!-- compile -->` (a whole translation unit without main: one is added) or `<!-- run -->`
#     (as compile, and the program is also the test doc_snippet.<file>_<n>, which passes when it
#     returns 0; a snippet that includes the mpi backend runs under mpirun with 2 processes). A block
#     that is a fragment says so: the line before its fence is `<!-- fragment -->`, and it is left
#     alone. A ```cpp block that is neither stops the configure step, naming the doc and its line.
#     The generated file opens with `#line <n> "<doc>"`, so a compiler error names the doc and its
#     line. A snippet links the backends whose headers it includes (<shardgraph/cpu.hpp>,
#     <shardgraph/threads/...>, ...); one that includes a backend not built here is skipped with a
#     message, and one that includes the cuda backend is compiled as CUDA (<file>_<n>.cu). The
#     examples' headers (examples/common) are on the include path. A snippet is a check, never
#     timed: it is built without optimization and its device code lowered to PTX only
#     (cmake/shardgraph_compile_check.cmake).
#     Editing a doc reruns the configure step.
include(shardgraph_compile_check)
include(shardgraph_mpiexec)
include(shardgraph_warnings)

# Writes one snippet and adds its target (and test, for `run`).
function(_shardgraph_add_doc_snippet doc_path stem first_line code mode)
  set(backends "")
  foreach(backend cpu threads mpi cuda nccl kokkos)
    if(code MATCHES "#include [<\"]shardgraph/${backend}[./]")
      list(APPEND backends shardgraph::${backend})
    endif()
  endforeach()
  shardgraph_skip_without_backends(skip "doc snippet ${doc_path}:${first_line}" ${backends})
  if(skip)
    return()
  endif()
  set(extension cpp)
  if("shardgraph::cuda" IN_LIST backends)
    set(extension cu)
  endif()
  set(source "${PROJECT_BINARY_DIR}/doc_snippets/${stem}.${extension}")
  set(text "#line ${first_line} \"${doc_path}\"\n${code}")
  if(NOT code MATCHES "int main\\(")
    string(APPEND text "int main() {}\n")
  endif()
  # Copied only when it changed, so a configure run rebuilds only the snippets that did.
  file(WRITE "${source}.new" "${text}")
  file(COPY_FILE "${source}.new" "${source}" ONLY_IF_DIFFERENT)
  file(REMOVE "${source}.new")
  set(target doc_snippet_${stem})
  add_executable(${target} "${source}")
  # shardgraph_examples_common: the examples' own headers (examples/common), which a tutorial may
  # include as a reader of it would.
  target_link_libraries(${target} PRIVATE shardgraph::core shardgraph_examples_common ${backends})
  if("shardgraph::cpu" IN_LIST backends)  # the cpu kernels compiled once (cpu/separate_kernels.hpp)
    target_link_libraries(${target} PRIVATE shardgraph::cpu_separate)
  endif()
  shardgraph_target_warnings(${target})
  shardgraph_without_optimization(${target})
  shardgraph_cuda_ptx_only(${target})
  if(mode STREQUAL "run" AND SHARDGRAPH_BUILD_TESTS)
    if("shardgraph::mpi" IN_LIST backends)
      if(NOT MPIEXEC_EXECUTABLE)
        message(STATUS "shardgraph: doc snippet ${doc_path}:${first_line} is compiled but not run: no mpirun")
        return()
      endif()
      add_test(NAME doc_snippet.${stem}
               COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} 2 ${SHARDGRAPH_MPIEXEC_PREFLAGS}
                       $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(doc_snippet.${stem} PROPERTIES LABELS "docs;mpi" TIMEOUT 120 PROCESSORS 2)
    else()
      add_test(NAME doc_snippet.${stem} COMMAND ${target})
      set_tests_properties(doc_snippet.${stem} PROPERTIES LABELS docs TIMEOUT 120)
    endif()
  endif()
endfunction()

function(shardgraph_add_doc_snippets)
  set(count 0)
  foreach(doc IN LISTS ARGN)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${doc}")
    file(RELATIVE_PATH doc_path "${PROJECT_SOURCE_DIR}" "${doc}")
    string(REGEX REPLACE "[/.]" "_" doc_stem "${doc_path}")
    string(REGEX REPLACE "_md$" "" doc_stem "${doc_stem}")
    file(READ "${doc}" rest)
    set(line_number 0)
    set(in_block FALSE)
    set(previous "")
    set(snippets 0)
    # Line by line, as strings: a CMake list would read the code's `;`, `[`, `]` and `\`.
    while(NOT rest STREQUAL "")
      string(FIND "${rest}" "\n" end)
      if(end EQUAL -1)
        set(line "${rest}")
        set(rest "")
      else()
        string(SUBSTRING "${rest}" 0 ${end} line)
        math(EXPR end "${end} + 1")
        string(SUBSTRING "${rest}" ${end} -1 rest)
      endif()
      math(EXPR line_number "${line_number} + 1")
      if(NOT in_block AND line MATCHES "^```cpp[ \t]*$")
        set(in_block TRUE)
        set(block "")
        math(EXPR block_first "${line_number} + 1")
        set(mode "")
        if(previous MATCHES "^<!-- (compile|run|fragment) -->[ \t]*$")
          set(mode "${CMAKE_MATCH_1}")
        endif()
      elseif(in_block AND line MATCHES "^```[ \t]*$")
        set(in_block FALSE)
        if(mode STREQUAL "" AND block MATCHES "int main\\(")
          set(mode compile)
        endif()
        if(mode STREQUAL "")
          message(FATAL_ERROR "shardgraph: ${doc_path}:${block_first}: this ```cpp block is neither complete nor "
                              "marked a fragment. put `<!-- fragment -->` on the line before its fence, or make it "
                              "complete (a main, or `<!-- compile -->` / `<!-- run -->` before the fence)")
        endif()
        if(NOT mode STREQUAL "fragment")
          math(EXPR snippets "${snippets} + 1")
          _shardgraph_add_doc_snippet("${doc_path}" "${doc_stem}_${snippets}" ${block_first} "${block}" ${mode})
        endif()
      elseif(in_block)
        string(APPEND block "${line}\n")
      endif()
      if(NOT line STREQUAL "")
        set(previous "${line}")
      endif()
    endwhile()
    math(EXPR count "${count} + ${snippets}")
  endforeach()
  message(STATUS "shardgraph: ${count} doc snippets compiled (doc_snippet_* targets)")
endfunction()
