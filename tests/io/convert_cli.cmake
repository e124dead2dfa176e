# shardgraph-convert and examples/load_hf end to end (cmake -P, from tests/CMakeLists.txt):
# a random multi-file HF checkpoint loads across tp x pp ranks and matches one rank, converts to a
# shardgraph checkpoint under a layout and back to HF, and the result equals the original bit for bit.
#   -DCONVERT=<shardgraph-convert> -DLOAD_HF=<load_hf> -DWORK=<scratch dir> -DFAMILY=gpt2|llama
cmake_minimum_required(VERSION 3.24)
foreach(var CONVERT LOAD_HF WORK FAMILY)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "shardgraph: convert_cli.cmake: -D${var}=... is missing. pass it from add_test")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")

function(step)
  list(JOIN ARGN " " line)
  message(STATUS "$ ${line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "shardgraph: convert_cli.cmake: '${line}' exited with ${status}")
  endif()
endfunction()

if(FAMILY STREQUAL "llama")  # grouped-query attention, files of 300 kB
  set(model --family llama --layers 4 --hidden 256 --heads 8 --kv-heads 2 --intermediate 512 --vocab 2000
            --positions 64 --max-file-size 300kB)
  set(dtype f32)
else()  # a vocabulary that tp = 2 pads (1001 -> 1002), bf16
  set(model --family gpt2 --layers 4 --hidden 128 --heads 4 --vocab 1001 --positions 64 --dtype bf16
            --max-file-size 300kB)
  set(dtype bf16)
endif()
step("${CONVERT}" random "${WORK}/hf" ${model} --seed 7)
step("${LOAD_HF}" "${WORK}/hf" --mesh tp=2,pp=2 --dtype ${dtype} --check-one-rank)
step("${CONVERT}" to-shardgraph "${WORK}/hf" "${WORK}/sharded" --mesh dp=2,tp=2)
step("${CONVERT}" to-hf "${WORK}/sharded" "${WORK}/back" --max-file-size 200kB)
step("${CONVERT}" compare "${WORK}/hf" "${WORK}/back")
step("${LOAD_HF}" "${WORK}/back" --mesh pp=2 --dtype ${dtype} --check-one-rank)
file(REMOVE_RECURSE "${WORK}")
