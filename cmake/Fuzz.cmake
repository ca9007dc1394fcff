# The libFuzzer build (RINGTRAIN_FUZZ=ON, clang only; `tools/run fuzz` configures it in
# build-fuzz/). Every library is compiled with libFuzzer's coverage instrumentation and with
# AddressSanitizer + UndefinedBehaviorSanitizer, so the fuzzers are guided by the decoders' own
# branches and any memory error or undefined behaviour in them aborts the run. The fuzz targets
# themselves add -fsanitize=fuzzer (libFuzzer's main) in tests/fuzz/CMakeLists.txt.
if(NOT RINGTRAIN_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "RINGTRAIN_FUZZ=ON needs clang: configure with "
                      "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
endif()
if(RINGTRAIN_CUDA)
  message(FATAL_ERROR "RINGTRAIN_FUZZ=ON builds the CPU code only: add -DRINGTRAIN_CUDA=OFF")
endif()
# -fno-sanitize=function: clang 14's check of indirect calls' function types cannot be emitted
# for C++20 coroutines (Asio's awaitables): "Cannot represent a difference across sections".
# -O1 (after the build type's -O3): the level libFuzzer's documentation uses, and far quicker to
# compile under the sanitizers.
set(RINGTRAIN_FUZZ_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=function
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer
    -O1)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${RINGTRAIN_FUZZ_FLAGS}>")
add_link_options(-fsanitize=address,undefined)
