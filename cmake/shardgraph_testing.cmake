# How tests are built and registered with CTest; included by tests/CMakeLists.txt.
#
#   shardgraph_add_test(<name> SOURCES <files...> LINK <targets...>
#                       [LABELS <labels...>] [MPI_PROCS <n...>] [TIMEOUT <seconds>])
#     One executable <name>_test, with main() from Catch2. Registered as the test <name>, or, with
#     MPI_PROCS, as <name>.np<n> run under mpiexec with n processes, once per n (label mpi).
#     A test that links a backend not built here is skipped at configure time with a message.
#     Label gpu: see "GPU tests" below.
#
#   shardgraph_add_compile_fail_test(<file.cpp> LINK <targets...>)
#     The test compile_fail.<stem> passes only if <file.cpp> FAILS to compile with the build's
#     compiler (-fsyntax-only, the include directories of the LINK targets) and the compiler's
#     output matches every regular expression (CMake syntax) written in the file on a line
#     `// expect: <regex>`, and none written on a line `// reject: <regex>`. Label compile_fail.
#     Where clang++ is found (SHARDGRAPH_CLANG_CXX) and the build's compiler is another, the file is
#     also compiled by clang++ (-fsyntax-only) as the test compile_fail.<stem>.clang, against the
#     same lines: the messages must read under both compilers.
#
# Tests see the macros SHARDGRAPH_SOURCE_DIR (the repository root) and SHARDGRAPH_GOLDEN_DIR
# (tests/golden), as string literals, to find their data.
include(shardgraph_warnings)

set(SHARDGRAPH_TESTS_DIR "${PROJECT_SOURCE_DIR}/tests")
set(SHARDGRAPH_DEFAULT_TEST_TIMEOUT 300)

# ---- Catch2: 3.x links Catch2WithMain; 2.x is one header, whose implementation is compiled once here
# (tests/catch_session.cpp, the library shardgraph_catch) under the main() of tests/catch_main.cpp
# and of tests/gpu_main.cpp. Tests include "catch.hpp" (tests/catch.hpp), which picks the right header.
set(SHARDGRAPH_CATCH2_FOUND FALSE)
find_package(Catch2 3 CONFIG QUIET)
if(TARGET Catch2::Catch2WithMain AND Catch2_VERSION VERSION_GREATER_EQUAL 3)
  add_library(shardgraph_test_main INTERFACE)
  target_link_libraries(shardgraph_test_main INTERFACE Catch2::Catch2WithMain)
  target_include_directories(shardgraph_test_main INTERFACE "${SHARDGRAPH_TESTS_DIR}")
  set(SHARDGRAPH_CATCH2_FOUND TRUE)
else()
  find_package(Catch2 2 CONFIG QUIET)
  if(NOT TARGET Catch2::Catch2)
    find_path(SHARDGRAPH_CATCH2_INCLUDE_DIR catch2/catch.hpp)
    mark_as_advanced(SHARDGRAPH_CATCH2_INCLUDE_DIR)
    if(SHARDGRAPH_CATCH2_INCLUDE_DIR)
      add_library(Catch2::Catch2 INTERFACE IMPORTED)
      set_target_properties(Catch2::Catch2 PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${SHARDGRAPH_CATCH2_INCLUDE_DIR}")
    endif()
  endif()
  if(TARGET Catch2::Catch2)
    add_library(shardgraph_test_main STATIC "${SHARDGRAPH_TESTS_DIR}/catch_main.cpp")
    target_link_libraries(shardgraph_test_main PUBLIC shardgraph_catch)
    set(SHARDGRAPH_CATCH2_FOUND TRUE)
  endif()
endif()
# shardgraph_catch: Catch2 without main() (3.x's Catch2::Catch2, or 2.x's header) and
# shardgraph::testing::run_catch_session (tests/catch_session.hpp).
if(SHARDGRAPH_CATCH2_FOUND)
  add_library(shardgraph_catch STATIC "${SHARDGRAPH_TESTS_DIR}/catch_session.cpp")
  target_link_libraries(shardgraph_catch PUBLIC Catch2::Catch2)
  target_include_directories(shardgraph_catch PUBLIC "${SHARDGRAPH_TESTS_DIR}")
  target_compile_features(shardgraph_catch PUBLIC cxx_std_20)
endif()
# shardgraph_test_cpu_threads: rank_program<cpu::backend, threads::communicator> compiled once
# (tests/support/cpu_threads_rank_program.hpp says how a test uses it).
if(SHARDGRAPH_CATCH2_FOUND AND TARGET shardgraph::cpu AND TARGET shardgraph::threads)
  add_library(shardgraph_test_cpu_threads STATIC "${SHARDGRAPH_TESTS_DIR}/support/cpu_threads_rank_program.cpp")
  target_link_libraries(shardgraph_test_cpu_threads PUBLIC shardgraph::cpu_separate shardgraph::threads)
  target_include_directories(shardgraph_test_cpu_threads PUBLIC "${SHARDGRAPH_TESTS_DIR}")
  shardgraph_target_warnings(shardgraph_test_cpu_threads)
endif()
if(NOT SHARDGRAPH_CATCH2_FOUND)
  message(NOTICE "shardgraph: tests skipped: Catch2 (3.x, or 2.x with catch2/catch.hpp) not found. "
                 "install catch2 (tools/install_deps.sh) or set Catch2_DIR; "
                 "-DSHARDGRAPH_BUILD_TESTS=OFF skips them silently")
  return()
endif()

# ---- GPU tests (label gpu). They are built whenever the cuda backend is, and must run anywhere:
# their main() (tests/gpu_main.cpp) returns 77 when no CUDA device is visible, and CTest's
# SKIP_RETURN_CODE 77 turns that into "Skipped" instead of "Failed". So a machine without a GPU
# still compiles every GPU test and reports them as skipped.
set(SHARDGRAPH_GPU_TEST_MAIN "${SHARDGRAPH_TESTS_DIR}/gpu_main.cpp")

# The library holding that main(), made when the first GPU test is registered.
function(_shardgraph_gpu_test_main)
  if(TARGET shardgraph_gpu_test_main)
    return()
  endif()
  add_library(shardgraph_gpu_test_main STATIC "${SHARDGRAPH_GPU_TEST_MAIN}")
  target_link_libraries(shardgraph_gpu_test_main PUBLIC shardgraph_catch CUDA::cudart)
endfunction()

include(shardgraph_mpiexec)

function(shardgraph_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT" "SOURCES;LINK;LABELS;MPI_PROCS")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "shardgraph: shardgraph_add_test(${name}): expected SOURCES <files...> "
                        "LINK <targets...> [LABELS ...] [MPI_PROCS ...] [TIMEOUT s], got "
                        "'${arg_UNPARSED_ARGUMENTS}'. fix the call in tests/CMakeLists.txt")
  endif()
  shardgraph_skip_without_backends(skip "test '${name}'" ${arg_LINK})
  if(skip)
    return()
  endif()
  set(gpu FALSE)
  if("gpu" IN_LIST arg_LABELS)
    set(gpu TRUE)
    if(NOT TARGET shardgraph::cuda OR NOT EXISTS "${SHARDGRAPH_GPU_TEST_MAIN}")
      message(STATUS "shardgraph: test '${name}' skipped: GPU tests need the cuda backend and "
                     "tests/gpu_main.cpp")
      return()
    endif()
    _shardgraph_gpu_test_main()
  endif()
  if(arg_MPI_PROCS AND NOT (TARGET shardgraph::mpi AND MPIEXEC_EXECUTABLE))
    message(STATUS "shardgraph: test '${name}' skipped: MPI tests need the mpi backend and mpiexec")
    return()
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${SHARDGRAPH_DEFAULT_TEST_TIMEOUT})
  endif()

  set(target ${name}_test)
  add_executable(${target} ${arg_SOURCES})
  if(gpu)
    target_link_libraries(${target} PRIVATE ${arg_LINK} shardgraph_gpu_test_main)
  else()
    target_link_libraries(${target} PRIVATE ${arg_LINK} shardgraph_test_main)
  endif()
  if("shardgraph::cpu" IN_LIST arg_LINK)
    target_link_libraries(${target} PRIVATE shardgraph::cpu_separate)
  endif()
  if("shardgraph::cpu" IN_LIST arg_LINK AND "shardgraph::threads" IN_LIST arg_LINK)
    target_link_libraries(${target} PRIVATE shardgraph_test_cpu_threads)
  endif()
  target_compile_definitions(${target} PRIVATE
    SHARDGRAPH_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    SHARDGRAPH_GOLDEN_DIR="${SHARDGRAPH_TESTS_DIR}/golden")
  shardgraph_target_warnings(${target})

  set(labels ${arg_LABELS})
  set(tests)
  if(arg_MPI_PROCS)
    list(APPEND labels mpi)
    foreach(procs IN LISTS arg_MPI_PROCS)
      add_test(NAME ${name}.np${procs}
               COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} ${procs} ${SHARDGRAPH_MPIEXEC_PREFLAGS}
                       $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(${name}.np${procs} PROPERTIES PROCESSORS ${procs})
      list(APPEND tests ${name}.np${procs})
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${target})
    list(APPEND tests ${name})
  endif()
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${tests} PROPERTIES TIMEOUT ${arg_TIMEOUT})
  if(labels)
    set_tests_properties(${tests} PROPERTIES LABELS "${labels}")
  endif()
  if(gpu)
    set_tests_properties(${tests} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

# Compile-fail tests compile their file with the build's compiler (-fsyntax-only, the includes of
# its LINK targets) and, where clang++ is found and the build's compiler is another, with clang++
# as well (compile_fail.<stem>.clang). They get no -Werror: the error under test must be an error on
# its own, as a user would see it.
find_program(SHARDGRAPH_CLANG_CXX NAMES clang++-19 clang++-20 clang++ clang++-18 clang++-17 clang++-16
             DOC "clang++ that compiles the compile-fail tests beside the build's compiler")
function(shardgraph_add_compile_fail_test file)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "LINK")
  get_filename_component(stem "${file}" NAME_WE)
  get_filename_component(file "${file}" ABSOLUTE)
  shardgraph_skip_without_backends(skip "compile-fail test '${stem}'" ${arg_LINK})
  if(skip)
    return()
  endif()
  set(includes "${PROJECT_SOURCE_DIR}/include")
  foreach(link IN LISTS arg_LINK)
    string(REGEX REPLACE "^shardgraph::" "" backend "${link}")
    if(NOT backend STREQUAL "core")
      list(APPEND includes "${PROJECT_SOURCE_DIR}/backends/${backend}/include")
    endif()
  endforeach()
  string(REPLACE ";" "|" includes "${includes}")
  set(compilers "${CMAKE_CXX_COMPILER}")
  set(names compile_fail.${stem})
  if(SHARDGRAPH_CLANG_CXX AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    list(APPEND compilers "${SHARDGRAPH_CLANG_CXX}")
    list(APPEND names compile_fail.${stem}.clang)
  endif()
  foreach(compiler name IN ZIP_LISTS compilers names)
    add_test(NAME ${name}
             COMMAND "${CMAKE_COMMAND}" "-DCOMPILER=${compiler}" "-DINCLUDES=${includes}"
                     "-DSOURCE=${file}" -P "${PROJECT_SOURCE_DIR}/cmake/expect_build_failure.cmake")
    set_tests_properties(${name} PROPERTIES LABELS compile_fail TIMEOUT ${SHARDGRAPH_DEFAULT_TEST_TIMEOUT})
  endforeach()
endfunction()
