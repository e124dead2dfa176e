# cmake -DBUILD_DIR=<build tree> -DTARGET=<target> -DSOURCE=<file.cpp> [-DCONFIG=<config>]
#       -P expect_build_failure.cmake
#
# Builds <target> (the object file of <file.cpp>) and succeeds only if the build FAILS and its output
# matches every regular expression (CMake syntax) that <file.cpp> writes on a line
#   // expect: <regex>
# Otherwise it fails and prints what was expected and what the compiler said.
foreach(var BUILD_DIR TARGET SOURCE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "shardgraph: expect_build_failure: -D${var}=... missing. "
                        "run it as registered by shardgraph_add_compile_fail_test")
  endif()
endforeach()

file(STRINGS "${SOURCE}" expect_lines REGEX "^[ \t]*// expect: ")
if(NOT expect_lines)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: no '// expect: <regex>' line. "
                      "add one that matches the message the compiler must print")
endif()

set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
# ASCII quotes in diagnostics, so the expected text need not spell GCC's typographic ones.
set(ENV{LC_ALL} C)
execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}" ${config_args}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

if(result EQUAL 0)
  list(JOIN expect_lines "\n" expected)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: compiled, but it must fail to compile.\n"
                      "expected an error matching:\n${expected}\n--- build output ---\n${output}")
endif()

set(missing)
foreach(line IN LISTS expect_lines)
  string(REGEX REPLACE "^[ \t]*// expect: " "" regex "${line}")
  if(NOT output MATCHES "${regex}")
    list(APPEND missing "${regex}")
  endif()
endforeach()
if(missing)
  list(JOIN missing "\n  " missing)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: failed to compile, but not with the expected message.\n"
                      "expected (regex) not found:\n  ${missing}\n--- build output ---\n${output}")
endif()
message(STATUS "shardgraph: ${SOURCE}: fails to compile, as expected")
