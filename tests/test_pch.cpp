// The one translation unit of bestofn_test_pch (tests/CMakeLists.txt): the target exists to build the
// precompiled header that every test reuses, with the tests' own flags. Nothing here is linked.
