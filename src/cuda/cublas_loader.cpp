#include "cuda/cublas_loader.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <utility>


#include "bestofn/util/error.h"

// The sonames of the cuBLAS this was compiled against; BESTOFN_CUBLAS_DIR (set by CMake to the
// directory CMake found them in) is tried when the loader's search path does not have them.
#define BESTOFN_STR2(x) #x
#define BESTOFN_STR(x) BESTOFN_STR2(x)
#ifndef BESTOFN_CUBLAS_DIR
#define BESTOFN_CUBLAS_DIR ""
#endif

namespace bestofn::cuda {
namespace {

constexpr const char* kLtSoname = "libcublasLt.so." BESTOFN_STR(CUBLAS_VER_MAJOR);
constexpr const char* kBlasSoname = "libcublas.so." BESTOFN_STR(CUBLAS_VER_MAJOR);

struct Libraries {
  void* lt = nullptr;
  void* blas = nullptr;
  std::string error;  // empty when both loaded
};

}  // namespace

void* open_library(const char* soname, const std::string& dir, std::string& error) {
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return h;
  const char* first = dlerror();  // dlerror() clears itself: read it once
  std::string why = first ? first : "not loadable";
  if (!dir.empty()) {
    const std::string full = dir + "/" + soname;
    if (void* h = dlopen(full.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    why += std::string("; ") + (e ? e : full + ": not loadable");
  }
  if (!error.empty()) error += "; ";
  error += std::string("cannot load ") + soname + " (" + why + ")";
  return nullptr;
}

namespace {

const Libraries& libraries() {
  static const Libraries libs = [] {
    Libraries l;
    l.lt = open_library(kLtSoname, BESTOFN_CUBLAS_DIR, l.error);
    l.blas = open_library(kBlasSoname, BESTOFN_CUBLAS_DIR, l.error);
    return l;
  }();
  return libs;
}

// The library's own function `name`, or null when the library or the symbol is missing.
void* symbol(bool lt, const char* name) {
  const Libraries& l = libraries();
  void* h = lt ? l.lt : l.blas;
  return h ? dlsym(h, name) : nullptr;
}

}  // namespace

bool load_cublas(std::string* why) {
  const Libraries& l = libraries();
  if (why) *why = l.error;
  return l.error.empty();
}

void require_cublas() {
  std::string why;
  if (!load_cublas(&why)) throw Error("CUDA engine: " + why + "; install the CUDA toolkit's cuBLAS or add its lib directory to LD_LIBRARY_PATH");
}

std::vector<std::string> missing_cublas_symbols() {
  // Every function defined below, by the name it is looked up under.
  static const std::pair<bool, const char*> kForwarded[] = {
      {true, "cublasLtCreate"}, {true, "cublasLtDestroy"}, {true, "cublasLtGetStatusName"}, {true, "cublasLtGetStatusString"},
      {true, "cublasLtGetVersion"}, {true, "cublasLtMatmul"}, {true, "cublasLtMatmulAlgoCheck"},
      {true, "cublasLtMatmulAlgoGetHeuristic"}, {true, "cublasLtMatmulDescCreate"}, {true, "cublasLtMatmulDescDestroy"},
      {true, "cublasLtMatmulDescSetAttribute"}, {true, "cublasLtMatmulPreferenceCreate"}, {true, "cublasLtMatmulPreferenceDestroy"},
      {true, "cublasLtMatmulPreferenceSetAttribute"}, {true, "cublasLtMatrixLayoutCreate"}, {true, "cublasLtMatrixLayoutDestroy"},
      {false, BESTOFN_STR(cublasCreate)}, {false, BESTOFN_STR(cublasDestroy)}, {false, BESTOFN_STR(cublasSetStream)},
      {false, BESTOFN_STR(cublasSetWorkspace)}, {false, "cublasSetMathMode"}, {false, "cublasGemmStridedBatchedEx"}};
  std::vector<std::string> missing;
  for (const auto& [lt, name] : kForwarded)
    if (!symbol(lt, name)) missing.push_back(name);
  return missing;
}

bool cublas_lt_is_loaded() {
  void* h = dlopen(kLtSoname, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return false;
  dlclose(h);
  return true;
}

}  // namespace bestofn::cuda

// The forwarding definitions. Each has the header's prototype (a mismatch is a compile error:
// two C functions of one name); the function pointer is looked up once. Names that cublas_v2.h
// turns into macros (cublasCreate -> cublasCreate_v2) are looked up by their expansion.
#define BESTOFN_FORWARD(lt, fn, type, fail, ...)                                                  \
  static const auto f = reinterpret_cast<type>(bestofn::cuda::symbol(lt, BESTOFN_STR(fn))); \
  return f ? f(__VA_ARGS__) : (fail)
#define BESTOFN_LT(fn, ...) BESTOFN_FORWARD(true, fn, decltype(&fn), CUBLAS_STATUS_NOT_INITIALIZED, __VA_ARGS__)
#define BESTOFN_BLAS(fn, ...) BESTOFN_FORWARD(false, fn, decltype(&fn), CUBLAS_STATUS_NOT_INITIALIZED, __VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* h) { BESTOFN_LT(cublasLtCreate, h); }
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t h) { BESTOFN_LT(cublasLtDestroy, h); }
const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t s) {
  BESTOFN_FORWARD(true, cublasLtGetStatusName, decltype(&cublasLtGetStatusName), "CUBLAS_LIBRARY_NOT_LOADED", s);
}
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t s) {
  BESTOFN_FORWARD(true, cublasLtGetStatusString, decltype(&cublasLtGetStatusString), "the cuBLASLt library could not be loaded", s);
}
size_t CUBLASWINAPI cublasLtGetVersion(void) { BESTOFN_FORWARD(true, cublasLtGetVersion, decltype(&cublasLtGetVersion), size_t{0}, ); }

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  BESTOFN_LT(cublasLtMatmul, h, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes, stream);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                                                    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                                                    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulHeuristicResult_t* result) {
  BESTOFN_LT(cublasLtMatmulAlgoCheck, h, desc, Adesc, Bdesc, Cdesc, Ddesc, algo, result);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                                                           cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                                                           cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref,
                                                           int requested, cublasLtMatmulHeuristicResult_t results[], int* returned) {
  BESTOFN_LT(cublasLtMatmulAlgoGetHeuristic, h, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  BESTOFN_LT(cublasLtMatmulDescCreate, desc, compute, scale);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { BESTOFN_LT(cublasLtMatmulDescDestroy, desc); }
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t size) {
  BESTOFN_LT(cublasLtMatmulDescSetAttribute, desc, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) { BESTOFN_LT(cublasLtMatmulPreferenceCreate, pref); }
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  BESTOFN_LT(cublasLtMatmulPreferenceDestroy, pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t size) {
  BESTOFN_LT(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                                       int64_t ld) {
  BESTOFN_LT(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { BESTOFN_LT(cublasLtMatrixLayoutDestroy, layout); }

cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t* h) { BESTOFN_BLAS(cublasCreate, h); }
cublasStatus_t CUBLASWINAPI cublasDestroy(cublasHandle_t h) { BESTOFN_BLAS(cublasDestroy, h); }
cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t h, cudaStream_t s) { BESTOFN_BLAS(cublasSetStream, h, s); }
cublasStatus_t CUBLASWINAPI cublasSetWorkspace(cublasHandle_t h, void* ws, size_t bytes) { BESTOFN_BLAS(cublasSetWorkspace, h, ws, bytes); }
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) { BESTOFN_BLAS(cublasSetMathMode, h, mode); }

// cublas_api.h adds a C++ overload of this name (a cudaDataType compute type): name the C one.
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                                                cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
                                                void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                                       const void* alpha, const void* A, cudaDataType at, int lda, long long int sa,
                                                       const void* B, cudaDataType bt, int ldb, long long int sb, const void* beta, void* C,
                                                       cudaDataType ct, int ldc, long long int sc, int batch, cublasComputeType_t compute,
                                                       cublasGemmAlgo_t algo) {
  static_cast<void>(static_cast<GemmStridedBatchedEx>(&cublasGemmStridedBatchedEx));  // the alias is the C prototype
  BESTOFN_FORWARD(false, cublasGemmStridedBatchedEx, GemmStridedBatchedEx, CUBLAS_STATUS_NOT_INITIALIZED, h, ta, tb, m, n, k, alpha, A, at,
                  lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute, algo);
}

}  // extern "C"
