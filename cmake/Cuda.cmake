# The CUDA backend is built when nvcc is found, unless -DBESTOFN_CUDA=OFF.
# Default target: Hopper with its arch-specific features (sm_90a: wgmma, TMA, FP8 tensor cores).
# CMAKE_CUDA_ARCHITECTURES on the command line overrides it.
set(BESTOFN_HAVE_CUDA OFF)
if(BESTOFN_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    # CMake < 3.26 (Debian 12 ships 3.25) does not know that nvcc >= 12 takes -std=c++20 and
    # refuses CMAKE_CUDA_STANDARD 20: teach it the flag.
    if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(BESTOFN_HAVE_CUDA ON)
    message(STATUS "bestofn: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  else()
    message(STATUS "bestofn: nvcc not found, building CPU only")
  endif()
else()
  message(STATUS "bestofn: CUDA backend forced OFF")
endif()

if(BESTOFN_HAVE_CUDA)
  # Device code only, one op per file, each with its host launcher (kernels/), plus the host side
  # of the CUDA backend (src/cuda/). Public headers stay pure C++.
  add_library(bestofn_cuda STATIC
    kernels/quantize_fp8.cu
    kernels/embedding.cu
    kernels/rmsnorm.cu
    kernels/quantize_act.cu
    kernels/convert.cu
    kernels/scale.cu
    kernels/swiglu.cu
    kernels/residual.cu
    kernels/argmax.cu
    kernels/rope_kv.cu
    kernels/attention_decode.cu
    kernels/attention_tiled.cu
    kernels/attention_prefill.cu
    kernels/prefix_attention.cu
    kernels/cascade_gather.cu
    kernels/sample.cu
    kernels/step_pointers.cu
    src/cuda/cuda_device.cpp
    src/cuda/gemm.cpp
    src/cuda/cuda_engine.cpp
    src/cuda/cuda_step.cpp
    src/cuda/cuda_step_ahead.cpp
    src/cuda/prefix_attention.cpp
    src/cuda/cascade_attention.cpp
    src/cuda/ceilings.cpp
    src/cuda/dev_weights.cpp
    src/cuda/paged_kv.cpp
    src/cuda/graph_cache.cpp
    src/cuda/cublas_loader.cpp
  )
  target_include_directories(bestofn_cuda PUBLIC include PRIVATE src kernels)
  # bestofn_cuda does not link bestofn_core (the engine interface, the weights, the errors it
  # uses): bestofn_backends links both, this one first.
  # cuBLAS and cuBLASLt are not linked: src/cuda/cublas_loader.cpp loads them when a CUDA engine
  # starts (libcublasLt's load-time relocations cost every bestofn process ~40 ms otherwise). Their
  # headers come with CUDA::cudart; the directory CMake found the libraries in is the fallback.
  if(CUDA_cublasLt_LIBRARY)
    get_filename_component(BESTOFN_CUBLAS_DIR "${CUDA_cublasLt_LIBRARY}" DIRECTORY)
  else()
    set(BESTOFN_CUBLAS_DIR "${CUDAToolkit_LIBRARY_DIR}")
  endif()
  target_link_libraries(bestofn_cuda PUBLIC CUDA::cudart ${CMAKE_DL_LIBS} PRIVATE nlohmann_json::nlohmann_json spdlog::spdlog)
  set_source_files_properties(src/cuda/cublas_loader.cpp PROPERTIES COMPILE_DEFINITIONS "BESTOFN_CUBLAS_DIR=\"${BESTOFN_CUBLAS_DIR}\"")
  set_target_properties(bestofn_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
  bestofn_warnings(bestofn_cuda)

  # --cascade-attention: FlashInfer's header-only batch prefill and decode (flashinfer-python 0.7.4), staged by
  # scripts/fetch_flashinfer.sh (scripts/setup.sh runs it; scripts/stage_deps.sh stages it for the
  # GPU machine). Without its headers the CUDA engine is built without that path and refuses the
  # flag with a one-line error (src/cuda/cascade_unavailable.cpp).
  set(BESTOFN_FLASHINFER_DIR "" CACHE PATH
      "FlashInfer's staged headers (scripts/fetch_flashinfer.sh; empty: BESTOFN_STAGED_DEPS/flashinfer, else .flashinfer)")
  set(_fi "${BESTOFN_FLASHINFER_DIR}")
  if(NOT _fi)
    if(BESTOFN_STAGED_DEPS)
      set(_fi "${BESTOFN_STAGED_DEPS}/flashinfer")
    else()
      set(_fi "${PROJECT_SOURCE_DIR}/.flashinfer")
    endif()
  endif()
  if(EXISTS "${_fi}/include/flashinfer/attention/prefill.cuh" AND NOT EXISTS "${_fi}/include/flashinfer/attention/decode.cuh")
    # Staged before the suffix side (FlashInfer's paged decode) was included: the .cu would not compile.
    message(FATAL_ERROR "bestofn: ${_fi} holds FlashInfer headers staged for an older kernels/cascade_attention.cu "
                        "(no attention/decode.cuh): rerun scripts/fetch_flashinfer.sh [DEST]")
  endif()
  if(EXISTS "${_fi}/include/flashinfer/attention/prefill.cuh")
    target_sources(bestofn_cuda PRIVATE kernels/cascade_attention.cu)
    # The wheel's CCCL (libcudacxx: all this file needs of it) before the toolkit's (nvcc adds its
    # own include/cccl as the last -isystem), as system headers: -Werror stays off FlashInfer's code.
    set_source_files_properties(kernels/cascade_attention.cu PROPERTIES COMPILE_OPTIONS
      "--system-include=${_fi}/cccl/libcudacxx/include;--system-include=${_fi}/include;--expt-relaxed-constexpr")
    set(BESTOFN_CASCADE_CU_FLAGS "-isystem ${_fi}/cccl/libcudacxx/include -isystem ${_fi}/include --expt-relaxed-constexpr")  # kernel_resources
    message(STATUS "bestofn: --cascade-attention with FlashInfer's headers from ${_fi}")
  else()
    target_sources(bestofn_cuda PRIVATE src/cuda/cascade_unavailable.cpp)
    message(WARNING "bestofn: no FlashInfer headers in ${_fi}: built without --cascade-attention (scripts/fetch_flashinfer.sh stages them)")
  endif()
endif()
