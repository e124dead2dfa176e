# Build settings of the targets that check code rather than measure it: the header test and the
# doc snippets prove that code compiles and links (and a `run` snippet that its few small steps
# run); none of them is timed.
#
#   shardgraph_cuda_ptx_only(<target>)
#     Device code is checked by nvcc's front end and lowered to PTX for the first CUDA architecture
#     only: no machine code (ptxas), which adds time and nothing to the check.
#
#   shardgraph_without_optimization(<target>)
#     C++ and CUDA host code compiled at -O0. Parsing, template instantiation, constant evaluation
#     and the front end's diagnostics are the optimized build's; the few warnings that only the
#     optimizer finds are left to the tests and examples, which build the same library code
#     optimized.

function(shardgraph_cuda_ptx_only target)
  if(CMAKE_CUDA_ARCHITECTURES)
    list(GET CMAKE_CUDA_ARCHITECTURES 0 arch)
    if(arch MATCHES "^([0-9]+[a-z]?)(-real|-virtual)?$")
      set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${CMAKE_MATCH_1}-virtual")
    endif()
  endif()
endfunction()

function(shardgraph_without_optimization target)
  if(NOT MSVC)
    # nvcc keeps its last -O, so -O0 overrides the build type's; -Xcompiler=-O0 would not, as nvcc
    # writes its own -O after the -Xcompiler flags.
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX,CUDA>:-O0>")
  endif()
endfunction()
