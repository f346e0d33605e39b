// cuBLAS and cuBLASLt are loaded when a CUDA engine first needs them, not at process start
// (src/cuda/cublas_loader.h). These run without a GPU: the library calls used here are host-only.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "cuda/cublas_loader.h"
#include "test_util.h"

namespace bestofn::cuda {
namespace {

// One test owns the whole sequence: before the first call nothing is loaded, after it the
// forwarded functions reach the real library (its own validation answers, not the fallback's).
TEST(CublasLoader, LoadsOnFirstUseAndForwardsToTheLibrary) {
  EXPECT_FALSE(cublas_lt_is_loaded()) << "libcublasLt was mapped before anything asked for it";
  std::string why;
  ASSERT_TRUE(load_cublas(&why)) << why;
  EXPECT_TRUE(why.empty());
  EXPECT_TRUE(cublas_lt_is_loaded());
  EXPECT_EQ(missing_cublas_symbols(), std::vector<std::string>{});

  // The library was built for the headers' major version (13 -> 13xxyy).
  EXPECT_EQ(cublasLtGetVersion() / 10000, static_cast<std::size_t>(CUBLAS_VER_MAJOR));
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");

  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(desc, nullptr);
  const cublasOperation_t trans = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans), CUBLAS_STATUS_SUCCESS);
  // A wrong attribute size is the library's INVALID_VALUE (the fallback would be NOT_INITIALIZED).
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);

  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 64, 16, 64), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const std::size_t bytes = 1 << 20;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, 2), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

// A library that cannot be loaded is a message naming it (and the fallback directory tried),
// appended to what earlier libraries said, never an exception from inside the loader.
TEST(CublasLoader, AMissingLibraryIsNamed) {
  std::string error;
  EXPECT_EQ(open_library("libbestofn-no-such-cublas.so.99", "/nonexistent-dir", error), nullptr);
  EXPECT_NE(error.find("cannot load libbestofn-no-such-cublas.so.99 ("), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent-dir/libbestofn-no-such-cublas.so.99"), std::string::npos) << error;
  EXPECT_EQ(open_library("libbestofn-no-such-cublasLt.so.99", "", error), nullptr);
  EXPECT_NE(error.find("; cannot load libbestofn-no-such-cublasLt.so.99 ("), std::string::npos) << error;
}

// The executable does not need the cuBLAS libraries to start: the dynamic loader, asked to say
// what it loads, loads the CUDA runtime (the control) and not cuBLAS.
TEST(CublasLoader, TheBinaryStartsWithoutLoadingCublas) {
  ASSERT_EQ(setenv("LD_DEBUG", "files", 1), 0);
  const test::CliResult r = test::run_cli({"--help"});
  unsetenv("LD_DEBUG");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.err.find("libcudart.so"), std::string::npos) << "LD_DEBUG printed nothing: " << r.err.substr(0, 400);
  EXPECT_EQ(r.err.find("libcublas"), std::string::npos) << r.err.substr(0, 2000);
}

}  // namespace
}  // namespace bestofn::cuda
