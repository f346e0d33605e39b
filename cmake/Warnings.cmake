# Warnings are errors in the project's own code (never in third-party headers: those come in as
# SYSTEM includes through their imported targets).
function(bestofn_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  if(BESTOFN_SANITIZE)
    # GCC 12's flow analysis under -fsanitize reports maybe-uninitialized inside libstdc++'s own
    # <regex>/<functional> (false positives that the plain build does not see): not an error there.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>
      $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-maybe-uninitialized>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# The CPU engine's hot loops are written to vectorize: build them for this machine's vector units
# (AVX2 / AVX-512 here). -DBESTOFN_NATIVE=OFF for a portable binary.
option(BESTOFN_NATIVE "Build CPU code with -march=native" ON)
function(bestofn_native target)
  if(BESTOFN_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
