# examples/generate end to end (cmake -P, from examples/CMakeLists.txt): the ids that two prompts
# generate on a mesh equal those of one rank, line for line ("ids: ..." of --print-ids), and the
# run prints the kv cache line and the tokens/s; a usage error exits with 2.
#   -DGENERATE=<example_generate> -DMODEL=<checkpoint dir> -DMESH=<mesh, e.g. tp=2>
cmake_minimum_required(VERSION 3.24)
foreach(var GENERATE MODEL MESH)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "shardgraph: generate_cli.cmake: -D${var}=... is missing. pass it from add_test")
  endif()
endforeach()

# The "ids:" lines that `generate MODEL --mesh <mesh> ...` prints.
function(ids_lines mesh out)
  set(command "${GENERATE}" "${MODEL}" --mesh ${mesh} --dtype f64 --kv-memory 1MiB --max-new-tokens 8
              --ignore-eos --prompt-ids 4,9,33 --prompt-ids 60,1,8,8,30,12,7,5,44 --print-ids)
  list(JOIN command " " line)
  message(STATUS "$ ${line}")
  execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE err)
  message(STATUS "${output}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "shardgraph: generate_cli.cmake: '${line}' exited with ${status}")
  endif()
  foreach(expect "kv cache: " "prefill: " "decode: ")
    string(FIND "${output}" "${expect}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "shardgraph: generate_cli.cmake: '${line}' printed no '${expect}' line")
    endif()
  endforeach()
  string(REGEX MATCHALL "ids:[ 0-9]*" ids "${output}")
  list(LENGTH ids count)
  if(NOT count EQUAL 2)
    message(FATAL_ERROR "shardgraph: generate_cli.cmake: '${line}' printed ${count} ids lines, not 2")
  endif()
  set(${out} "${ids}" PARENT_SCOPE)
endfunction()

ids_lines(tp=1 one_rank)
ids_lines(${MESH} layout)
if(NOT layout STREQUAL one_rank)
  message(FATAL_ERROR "shardgraph: generate_cli.cmake: --mesh ${MESH} generated '${layout}', one rank '${one_rank}'")
endif()
if(NOT one_rank MATCHES "^ids:( [0-9]+)+;ids:( [0-9]+)+$")
  message(FATAL_ERROR "shardgraph: generate_cli.cmake: the ids lines '${one_rank}' are not 8 ids each")
endif()

execute_process(COMMAND "${GENERATE}" "${MODEL}" --max-new-tokens RESULT_VARIABLE status ERROR_VARIABLE err)
if(NOT status EQUAL 2 OR NOT err MATCHES "shardgraph: generate: missing value after --max-new-tokens")
  message(FATAL_ERROR "shardgraph: generate_cli.cmake: a usage error exited with ${status}: ${err}")
endif()
