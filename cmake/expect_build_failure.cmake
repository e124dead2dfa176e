# cmake -DCOMPILER=<c++ compiler> -DINCLUDES=<dir|dir...> -DSOURCE=<file.cpp> -P expect_build_failure.cmake
#
# Compiles <file.cpp> with <compiler> (-std=c++20 -fsyntax-only -I<dir>...) and succeeds only if the
# compile FAILS, its output matches every regular expression (CMake syntax) that <file.cpp> writes
# on a line
#   // expect: <regex>
# and matches none written on a line
#   // reject: <regex>
# Otherwise it fails and prints what was expected and what the compiler said.
#
# clang prints the text of a compile-time error in pieces of 31 characters (clang 19 and later:
# text_piece{"shardgraph: linear \'c_fc\': the "}, text_piece{"input..."}) or as a pack of characters
# ('s', 'h', 'a', ...; older clang; see ir/compile_error.hpp). Either is read back as the text it
# spells before matching.
foreach(var COMPILER INCLUDES SOURCE)
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
string(REPLACE "|" ";" includes "${INCLUDES}")
list(TRANSFORM includes PREPEND "-I")
execute_process(
  COMMAND "${COMPILER}" -std=c++20 -fsyntax-only ${includes} "${SOURCE}"
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

if(result EQUAL 0)
  list(JOIN expect_lines "\n" expected)
  message(FATAL_ERROR "shardgraph: ${SOURCE}: compiled, but it must fail to compile.\n"
                      "expected an error matching:\n${expected}\n--- build output ---\n${output}")
endif()

# clang's spellings read as the text they spell: pieces joined, then 's', 'h', '\'', ... -> sh'
set(text "${output}")
string(REGEX REPLACE "\"}, (shardgraph::)?text_piece{\"" "" text "${text}")
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
