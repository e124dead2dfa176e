# ---- MPI launcher: ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} <n> <preflags> <exe> ${MPIEXEC_POSTFLAGS}.
# Open MPI refuses more ranks than cores without --oversubscribe (the CI machine has 2 cores, tests use
# up to 4) and refuses to run as root without --allow-run-as-root (containers).
set(SHARDGRAPH_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
if(TARGET shardgraph::mpi AND MPIEXEC_EXECUTABLE)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version
                  OUTPUT_VARIABLE mpiexec_version ERROR_VARIABLE mpiexec_version RESULT_VARIABLE ignored)
  if(mpiexec_version MATCHES "Open MPI|OpenRTE")
    list(APPEND SHARDGRAPH_MPIEXEC_PREFLAGS --oversubscribe)
    execute_process(COMMAND id -u OUTPUT_VARIABLE user_id OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET RESULT_VARIABLE ignored)
    if(user_id STREQUAL "0")
      list(APPEND SHARDGRAPH_MPIEXEC_PREFLAGS --allow-run-as-root)
    endif()
  endif()
endif()
