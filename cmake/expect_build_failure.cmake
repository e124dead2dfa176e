# cmake -DBUILD_DIR=<build tree> -DTARGET=<target> -DSOURCE=<file.cpp> [-DCONFIG=<config>]
#       -P expect_build_failure.cmake
# cmake -DCOMPILER=<c++ compiler> -DINCLUDES=<dir|dir...> -DSOURCE=<file.cpp> -P expect_build_failure.cmake
#
# Builds <target> (the object file of <file.cpp>) in the build tree, or, given COMPILER, compiles
# <file.cpp> with it (-std=c++20 -fsyntax-only -I<dir>...), and succeeds only if the compile FAILS,
# its output matches every regular expression (CMake syntax) that <file.cpp> writes on a line
#   // expect: <regex>
# and matches none written on a line
#   // reject: <regex>
# Otherwise it fails and prints what was expected and what the compiler said.
#
# clang prints the text of a compile-time error as a pack of characters ('s', 'h', 'a', ...; see
# passes/compile.hpp); such a run of characters is read back as the text it spells before matching.
set(required SOURCE)
if(NOT COMPILER)
  list(APPEND required BUILD_DIR TARGET)
endif()
foreach(var IN LISTS required)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "shardgraph: expect_build_failure: -D${var}=... missing. "
                        "run it as registered by shardgraph_add_compile_fail_test")
  endif()
endforeach()

file(STRINGS "${SOURCE}" expect_lines REGEX "^[ \t]*// expect: ")
file(STRINGS "${SOURCE}" reject_lines REGEX "^[ \t]*// reject: ")
if(NOT expect_lines)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: no '// expect: <regex>' line. "
                      "add one that matches the message the compiler must print")
endif()

# ASCII quotes in diagnostics, so the expected text need not spell GCC's typographic ones.
set(ENV{LC_ALL} C)
if(COMPILER)
  string(REPLACE "|" ";" includes "${INCLUDES}")
  list(TRANSFORM includes PREPEND "-I")
  execute_process(
    COMMAND "${COMPILER}" -std=c++20 -fsyntax-only ${includes} "${SOURCE}"
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
else()
  set(config_args)
  if(CONFIG)
    set(config_args --config "${CONFIG}")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}" ${config_args}
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
endif()

if(result EQUAL 0)
  list(JOIN expect_lines "\n" expected)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: compiled, but it must fail to compile.\n"
                      "expected an error matching:\n${expected}\n--- build output ---\n${output}")
endif()

# 's', 'h', '\'', ... -> sh' (clang's spelling of a character pack, read as the text it spells)
set(text "${output}")
string(REGEX REPLACE "'\\\\(.)'(, |>)" "\\1" text "${text}")
string(REGEX REPLACE "'([^'\\\\])'(, |>)" "\\1" text "${text}")

# The regexes, of lines "// <tag>: <regex>", whose match with `text` is not `wanted` (TRUE or FALSE).
function(unmet_lines lines tag wanted out)
  set(unmet)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*// ${tag}: " "" regex "${line}")
    set(matched FALSE)
    if(text MATCHES "${regex}")
      set(matched TRUE)
    endif()
    if(NOT matched STREQUAL wanted)
      list(APPEND unmet "${regex}")
    endif()
  endforeach()
  set(${out} "${unmet}" PARENT_SCOPE)
endfunction()
unmet_lines("${expect_lines}" expect TRUE missing)
unmet_lines("${reject_lines}" reject FALSE unwanted)
if(missing OR unwanted)
  list(JOIN missing "\n  " missing)
  list(JOIN unwanted "\n  " unwanted)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: failed to compile, but not with the expected message.\n"
                      "expected (regex) not found:\n  ${missing}\nrejected (regex) found:\n  ${unwanted}\n"
                      "--- build output ---\n${output}")
endif()
message(STATUS "shardgraph: ${SOURCE}: fails to compile, as expected")
