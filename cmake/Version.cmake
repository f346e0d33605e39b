# The version and the commit, for `bestofn --version`, summaries and benchmark JSON:
# generated/bestofn_version.h, written by cmake/WriteVersion.cmake at configure time and again
# before every build (target bestofn_version), so that it follows commits made after configuring.
set(_bestofn_version_h ${CMAKE_BINARY_DIR}/generated/bestofn_version.h)
set(_bestofn_version_args -DSRC_DIR=${CMAKE_SOURCE_DIR} -DOUT=${_bestofn_version_h} -DVERSION=${PROJECT_VERSION})
execute_process(COMMAND ${CMAKE_COMMAND} ${_bestofn_version_args} -P ${CMAKE_SOURCE_DIR}/cmake/WriteVersion.cmake)
add_custom_target(bestofn_version ALL
  COMMAND ${CMAKE_COMMAND} ${_bestofn_version_args} -P ${CMAKE_SOURCE_DIR}/cmake/WriteVersion.cmake
  BYPRODUCTS ${_bestofn_version_h}
  COMMENT "bestofn_version.h: the commit being built")
