# examples/generate --image end to end (cmake -P, from examples/CMakeLists.txt): the golden LLaVA
# (tests/golden/llava) continues a prompt after tests/golden/clip_image/image.png, read from the
# file and preprocessed as a preprocessor_config.json written beside a copy of the checkpoint (the
# CLIP config of clip_image, at the model's 8 x 8 pixels); tp = 2 generates the ids one rank does.
#   -DGENERATE=<example_generate> -DGOLDEN=<tests/golden> -DWORK=<a scratch folder>
cmake_minimum_required(VERSION 3.24)
foreach(var GENERATE GOLDEN WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "shardgraph: generate_image_cli.cmake: -D${var}=... is missing. pass it from add_test")
  endif()
endforeach()

set(model "${WORK}/llava_with_processor")
file(REMOVE_RECURSE "${model}")
file(COPY "${GOLDEN}/llava/config.json" "${GOLDEN}/llava/model.safetensors" DESTINATION "${model}")
file(READ "${GOLDEN}/clip_image/preprocessor_config.json" processor)
string(JSON processor SET "${processor}" size shortest_edge 8)
string(JSON processor SET "${processor}" crop_size height 8)
string(JSON processor SET "${processor}" crop_size width 8)
file(WRITE "${model}/preprocessor_config.json" "${processor}")

# The "ids:" line that `generate --image ... --mesh <mesh>` prints.
function(image_ids mesh out)
  set(command "${GENERATE}" "${model}" --image "${GOLDEN}/clip_image/image.png" --mesh ${mesh} --dtype f64
              --max-new-tokens 16 --ignore-eos --prompt-ids 1,17,33,5,48 --print-ids)
  list(JOIN command " " line)
  message(STATUS "$ ${line}")
  execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE err)
  message(STATUS "${output}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "shardgraph: generate_image_cli.cmake: '${line}' exited with ${status}")
  endif()
  string(REGEX MATCH "ids:( [0-9]+)+" ids "${output}")
  string(REGEX MATCHALL "[0-9]+" numbers "${ids}")
  list(LENGTH numbers count)
  if(NOT count EQUAL 16)
    message(FATAL_ERROR "shardgraph: generate_image_cli.cmake: '${line}' printed '${ids}', not 16 ids")
  endif()
  set(${out} "${ids}" PARENT_SCOPE)
endfunction()

image_ids(tp=1 one_rank)
image_ids(tp=2 two_ranks)
if(NOT two_ranks STREQUAL one_rank)
  message(FATAL_ERROR "shardgraph: generate_image_cli.cmake: tp=2 generated '${two_ranks}', one rank '${one_rank}'")
endif()

execute_process(COMMAND "${GENERATE}" "${model}" --image "${GOLDEN}/clip_image/image.png" --mesh pp=2
                        --prompt-ids 1,17 RESULT_VARIABLE status ERROR_VARIABLE err)
if(NOT status EQUAL 1 OR NOT err MATCHES "shardgraph: generate --image: runs one prompt on tp ranks")
  message(FATAL_ERROR "shardgraph: generate_image_cli.cmake: --image on pp=2 exited with ${status}: ${err}")
endif()
