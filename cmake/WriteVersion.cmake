# Writes ${OUT} (bestofn_version.h) from ${SRC_DIR}/cmake/version.h.in with the commit of the tree
# being built: $ENV{BESTOFN_COMMIT} when set (benchmarks/device_check.sh, where the tree may have
# no .git of its own), else `git rev-parse --short=12 HEAD` plus "-dirty" when tracked files
# differ from it, else "unknown". Run at configure time and before every build (the
# bestofn_version target), and rewritten only when the text changes, so that a binary and the
# benchmark JSON it prints name the commit it was built from without rebuilding on every run.
set(BESTOFN_COMMIT "unknown")
if(DEFINED ENV{BESTOFN_COMMIT})
  set(BESTOFN_COMMIT $ENV{BESTOFN_COMMIT})
else()
  find_package(Git QUIET)
  if(GIT_FOUND)
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
      WORKING_DIRECTORY ${SRC_DIR} OUTPUT_VARIABLE _commit
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _commit)
      set(BESTOFN_COMMIT ${_commit})
      execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
        WORKING_DIRECTORY ${SRC_DIR} OUTPUT_VARIABLE _dirty ERROR_QUIET)
      if(_dirty)
        string(APPEND BESTOFN_COMMIT "-dirty")
      endif()
    endif()
  endif()
endif()
set(PROJECT_VERSION ${VERSION})
configure_file(${SRC_DIR}/cmake/version.h.in ${OUT}.tmp @ONLY)
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
