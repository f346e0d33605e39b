# The unit tests of a sanitizer build, run as tests of this build. scripts/setup.sh configures
# build-asan (-DBESTOFN_SANITIZE=ON -DBESTOFN_CUDA=OFF -DBESTOFN_NATIVE=OFF: CPU only, ASan + UBSan)
# and passes -DBESTOFN_ASAN_BUILD=<it> here, so that CI's one `ctest` runs every unit test binary
# of that build as a test labelled "asan". Any ASan report (leaks included) or UBSan report fails.
set(BESTOFN_ASAN_BUILD "" CACHE PATH "A -DBESTOFN_SANITIZE=ON build directory whose unit tests this build runs (label asan)")
if(NOT BESTOFN_ASAN_BUILD OR NOT BESTOFN_BUILD_TESTS)
  return()
endif()
# Two tests whose time goes to Python and the OS rather than to bestofn's code run in this build
# only: HumanEval+'s 164 canonical solutions against all their plus tests (35-40 s in either
# build), and 10,000 sandbox runs whose open fds, processes and RSS this build checks (LeakSanitizer
# needs no 10,000 runs to see a leak, and RSS says nothing under ASan).
set(_asan_skip_test_cli_score CliScore.HumanEvalPlusCanonicalSolutionsPassBaseAndPlusTests)
set(_asan_skip_test_faults VerifierFaults.TenThousandCandidatesLeakNothing)
# And the slowest repeats (each 15-30 s under the sanitizers, ~150 s of CI's two cores in all; CI
# ran over its 30 minutes): whole runs repeated to check what the OS sees (a second writer's lock,
# a SIGKILLed run resumed, an injected write failure, a signal between two writers) or the same
# arithmetic at a larger vocabulary. The main build runs them all; here a shorter test reaches
# each code path they do: resume (EvalFaults.SigtermLeavesACleanStateThatResumeCompletes), shard
# merging (EvalLayer.RunMergeOfTwoShardsEqualsTheWholeRun, Shard.MergeRefuses...), a write that
# fails (DiskFull.GenerateOnAFullTmpfsFailsCleanly), the samplers (their small-vocabulary tests).
# Then (a clean .ci/run took 24-28 min here from run to run) what the OS does with FIFOs, symlinks
# and a closed stdout, a second full-disk eval, and the CLI's reproducibility across --batch and
# --threads, whose engine side Scheduler.CandidatesAreReproducibleWhateverBatchAndThreads checks here.
list(APPEND _asan_skip_test_faults DiskFull.GenerateInjectedWriteFailure)
set(_asan_skip_test_eval Eval.ResumeAfterSigkillEqualsAnUninterruptedRun EvalFaults.OneWriterPerRunDirectory
    EvalFaults.AFullDiskFailsClearlyAndTheRunResumesElsewhere)
set(_asan_skip_test_shard Shard.EvalShardsMergedEqualAnUnshardedRun)
set(_asan_skip_test_cli_generate CliGenerate.TwoRunsOnOneOutAndASignalLeaveOneWholeFile
    CliGenerate.DoneWhenCommandIsReproducibleWhateverBatchAndThreads)
set(_asan_skip_test_cli_common CliOutput.AFifoOrASymlinkIsWrittenThroughNotReplaced CliErrors.FifosDevicesAndDirectoriesAreNotReadForever
    CliOutput.AStdoutThatCannotBeWrittenFailsTheRun)
set(_asan_skip_test_sampler Sampler.LargeVocabulariesDrawTheReferenceTokens)
set(_asan_skip_test_sampler_passes SamplerPasses.LargeVocabularyRowsDrawTheHostTokens)
# A build directory that is not a sanitizer build would pass every asan test without checking anything.
if(NOT EXISTS ${BESTOFN_ASAN_BUILD}/CMakeCache.txt)
  message(FATAL_ERROR "BESTOFN_ASAN_BUILD=${BESTOFN_ASAN_BUILD} is not a configured build directory (no CMakeCache.txt)")
endif()
file(STRINGS ${BESTOFN_ASAN_BUILD}/CMakeCache.txt _sanitize REGEX "^BESTOFN_SANITIZE:BOOL=")
if(NOT _sanitize MATCHES "=ON$")
  message(FATAL_ERROR "${BESTOFN_ASAN_BUILD} is not a -DBESTOFN_SANITIZE=ON build (${_sanitize}); configure it as scripts/setup.sh does")
endif()
# ctest -j starts the tests of highest COST first; a clean checkout (CI) has no timings of earlier
# runs, so without these the longest sanitizer binaries, registered last, would start last and run
# alone at the end. The slowest are also split into gtest shards (GTEST_TOTAL_SHARDS and
# GTEST_SHARD_INDEX: each shard runs every k-th test) so the two cores finish together. Seconds are
# this build's times on a 2-core VM at 96a7257, less the tests skipped above.
set(_asan_seconds_test_eval 85)
set(_asan_shards_test_eval 2)
set(_asan_seconds_test_cli_generate 95)
set(_asan_shards_test_cli_generate 2)
set(_asan_seconds_test_shard 38)
set(_asan_seconds_test_cli_common 55)
set(_asan_seconds_test_cpu_attention 33)
set(_asan_seconds_test_sampler_passes 19)
set(_asan_seconds_test_faults 31)
set(_asan_seconds_test_scheduler 60)
set(_asan_seconds_test_tokenizer 60)
set(_asan_seconds_test_sampler 5)
get_property(_unit_tests GLOBAL PROPERTY BESTOFN_UNIT_TESTS)
foreach(_t IN LISTS _unit_tests)
  set(_filter)
  if(DEFINED _asan_skip_${_t})
    list(JOIN _asan_skip_${_t} ":" _skip)
    set(_filter --gtest_filter=-${_skip})
  endif()
  set(_shards 1)
  if(DEFINED _asan_shards_${_t})
    set(_shards ${_asan_shards_${_t}})
  endif()
  set(_cost 10)
  if(DEFINED _asan_seconds_${_t})
    math(EXPR _cost "${_asan_seconds_${_t}} / ${_shards}")
  endif()
  set(_env "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1"
           "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
  math(EXPR _last "${_shards} - 1")
  foreach(_i RANGE ${_last})
    set(_name asan_${_t})
    set(_shard_env)
    if(_shards GREATER 1)
      set(_name asan_${_t}_${_i})
      set(_shard_env GTEST_TOTAL_SHARDS=${_shards} GTEST_SHARD_INDEX=${_i})
    endif()
    add_test(NAME ${_name} COMMAND ${BESTOFN_ASAN_BUILD}/tests/${_t} --gtest_brief=1 ${_filter} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    # A missing ../shared file (a clone without it) skips the binary's shard (tests/test_util.cpp).
    set_tests_properties(${_name} PROPERTIES LABELS asan TIMEOUT 1200 COST ${_cost} SKIP_REGULAR_EXPRESSION "bestofn-test-skip: "
      ENVIRONMENT "${_env};${_shard_env}")
  endforeach()
endforeach()
message(STATUS "bestofn: running the unit tests of ${BESTOFN_ASAN_BUILD} (label asan)")
