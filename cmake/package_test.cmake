# cmake -DMODE=install|subdirectory -DBUILD_DIR=... -DSOURCE_DIR=... -DCONSUMER_DIR=tests/package
#       -DWORK_DIR=... -DGENERATOR=... [-DMAKE_PROGRAM=...] [-DCXX_COMPILER=...] [-DCONFIG=...]
#       -P package_test.cmake
#
# Builds and runs the consumer project tests/package the way a user would:
#   install       `cmake --install <build> --prefix <work>/prefix`, then find_package(shardgraph) from it;
#   subdirectory  add_subdirectory(<source tree>) with no install at all.
foreach(var MODE BUILD_DIR SOURCE_DIR CONSUMER_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "shardgraph: package_test: -D${var}=... missing. run it through ctest -L package")
  endif()
endforeach()

# run(<what> <command...>): runs a command, stops with its output if it fails.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "shardgraph: package test (${MODE}): ${what} failed (${result}).\n"
                        "command: ${command}\n--- output ---\n${output}")
  endif()
  message(STATUS "shardgraph: package test (${MODE}): ${what}: ok")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(config_args)
set(build_type Release)
if(CONFIG)
  set(config_args --config "${CONFIG}")
  set(build_type "${CONFIG}")
endif()
set(configure_args -G "${GENERATOR}" "-DCMAKE_BUILD_TYPE=${build_type}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

if(MODE STREQUAL "install")
  set(prefix "${WORK_DIR}/prefix")
  run("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}" "-DSHARDGRAPH_EXPECTED_PREFIX=${prefix}")
elseif(MODE STREQUAL "subdirectory")
  # Backends with slow or absent dependency checks are switched off: the point is the mechanism.
  list(APPEND configure_args "-DSHARDGRAPH_SOURCE_DIR=${SOURCE_DIR}"
       -DSHARDGRAPH_WITH_MPI=OFF -DSHARDGRAPH_WITH_CUDA=OFF -DSHARDGRAPH_WITH_NCCL=OFF
       -DSHARDGRAPH_WITH_KOKKOS=OFF)
else()
  message(FATAL_ERROR "shardgraph: package_test: MODE '${MODE}' unknown. use install or subdirectory")
endif()

run("configure the consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build" ${configure_args})
run("build the consumer" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" ${config_args})

file(GLOB_RECURSE consumer "${WORK_DIR}/build/shardgraph_consumer" "${WORK_DIR}/build/shardgraph_consumer.exe")
if(NOT consumer)
  message(FATAL_ERROR "shardgraph: package test (${MODE}): the consumer built but its program "
                      "shardgraph_consumer is not under ${WORK_DIR}/build")
endif()
list(GET consumer 0 consumer)
run("run the consumer" "${consumer}")
