#pragma once
// cuBLAS and cuBLASLt are loaded on first use, not when bestofn starts.
//
// libcublasLt alone is a 540 MB library whose load-time relocations cost ~40 ms of every process
// start: `bestofn score`, the help text, each CLI test. So bestofn does not link it. cublas_loader.cpp
// defines the few cuBLAS entry points the CUDA backend calls, with the header's own prototypes;
// each resolves the library's function with dlopen/dlsym once and forwards. A CUDA engine (the
// only user) calls require_cublas() first, so that a missing library is a one-line error naming
// it instead of a failed call.
#include <string>
#include <vector>

namespace bestofn::cuda {

// Loads libcublasLt and libcublas (once; thread-safe). False, with why = the sonames tried and
// dlerror(), when either cannot be loaded.
bool load_cublas(std::string* why = nullptr);

// load_cublas(), or throws bestofn::Error with the reason.
void require_cublas();

// The forwarded functions that the loaded libraries lack (all of them when not loaded): for tests.
std::vector<std::string> missing_cublas_symbols();

// dlopen(soname), then dlopen(dir/soname) when dir is not empty: the handle, or null with
// "cannot load SONAME (why)" appended to error ("; "-separated). What load_cublas() runs per library.
void* open_library(const char* soname, const std::string& dir, std::string& error);

// Whether libcublasLt is mapped into this process now (dlopen RTLD_NOLOAD): for tests.
bool cublas_lt_is_loaded();

}  // namespace bestofn::cuda
