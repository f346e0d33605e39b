# The version and the commit, for `bestofn --version`, summaries and benchmark JSON.
find_package(Git QUIET)
set(BESTOFN_COMMIT "unknown")
if(DEFINED ENV{BESTOFN_COMMIT})  # set by benchmarks/device_check.sh, where the tree may have no .git of its own
  set(BESTOFN_COMMIT $ENV{BESTOFN_COMMIT})
elseif(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _commit
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _commit)
    set(BESTOFN_COMMIT ${_commit})
  endif()
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/version.h.in ${CMAKE_BINARY_DIR}/generated/bestofn_version.h @ONLY)
