# shardgraph-convert and examples/load_hf end to end (cmake -P, from tests/CMakeLists.txt):
# a random multi-file HF checkpoint loads across tp x pp ranks and matches one rank, converts to a
# shardgraph checkpoint under a layout and back to HF, and the result equals the original bit for bit.
# A checkpoint that disagrees with its config.json (fewer layers or another vocab_size in the config)
# is refused by the converter as by the loader, unused tensors being allowed only when asked for.
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
  set(dtype_name F32)
else()  # a vocabulary that tp = 2 pads (1001 -> 1002), bf16
  set(model --family gpt2 --layers 4 --hidden 128 --heads 4 --vocab 1001 --positions 64 --dtype bf16
            --max-file-size 300kB)
  set(dtype bf16)
  set(dtype_name BF16)
endif()

# `step`, expecting failure with a message containing `expect`.
function(refused expect)
  list(JOIN ARGN " " line)
  message(STATUS "$ ${line}   (refused: ${expect})")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status ERROR_VARIABLE err)
  if(status EQUAL 0)
    message(FATAL_ERROR "shardgraph: convert_cli.cmake: '${line}' succeeded; it should refuse: ${expect}")
  endif()
  string(FIND "${err}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "shardgraph: convert_cli.cmake: '${line}' failed without '${expect}':\n${err}")
  endif()
endfunction()

step("${CONVERT}" random "${WORK}/hf" ${model} --seed 7)

# the same files under a config.json of 3 layers (the files hold 4), then of another vocab_size
file(MAKE_DIRECTORY "${WORK}/bad")
file(READ "${WORK}/hf/config.json" config)
file(GLOB files "${WORK}/hf/*.safetensors*")
file(COPY ${files} DESTINATION "${WORK}/bad")
string(REGEX REPLACE "\"(n_layer|num_hidden_layers)\": 4" "\"\\1\": 3" fewer_layers "${config}")
file(WRITE "${WORK}/bad/config.json" "${fewer_layers}")
refused("unused tensors (read by no parameter" "${CONVERT}" to-shardgraph "${WORK}/bad" "${WORK}/bad-out")
step("${CONVERT}" to-shardgraph "${WORK}/bad" "${WORK}/bad-out" --allow-unused-tensors)
string(REGEX REPLACE "\"vocab_size\": ([0-9]+)" "\"vocab_size\": 999" other_vocab "${config}")
file(WRITE "${WORK}/bad/config.json" "${other_vocab}")
refused("found ${dtype_name} (" "${CONVERT}" to-shardgraph "${WORK}/bad" "${WORK}/bad-out2")
refused("of shape (999, " "${CONVERT}" to-shardgraph "${WORK}/bad" "${WORK}/bad-out2" --allow-unused-tensors)
step("${LOAD_HF}" "${WORK}/hf" --mesh tp=2,pp=2 --dtype ${dtype} --check-one-rank)
step("${CONVERT}" to-shardgraph "${WORK}/hf" "${WORK}/sharded" --mesh dp=2,tp=2)
step("${CONVERT}" to-hf "${WORK}/sharded" "${WORK}/back" --max-file-size 200kB)
step("${CONVERT}" compare "${WORK}/hf" "${WORK}/back")
step("${LOAD_HF}" "${WORK}/back" --mesh pp=2 --dtype ${dtype} --check-one-rank)
file(REMOVE_RECURSE "${WORK}")
