# AddressSanitizer + UndefinedBehaviorSanitizer for the whole build (PLDR_SANITIZE=ON).
# PLDR_FUZZ=ON (clang only): libFuzzer instrumentation with ASan + UBSan for the library and the
# fuzz targets in fuzz/ (see fuzz/README.md; build dir build-fuzz, scripts/fuzz.sh).
if(PLDR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "PLDR_FUZZ needs clang: configure with CC=clang CXX=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=all -g)
  add_link_options(-fsanitize=address,undefined)
elseif(PLDR_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
# Under the sanitizers, the elements that Tensor::resize_for_overwrite adds are filled with 0xFF
# bytes (NaN for floats, -1 for integers) instead of being left as they are (core/tensor.h): code
# that reads them before writing them then fails its checks, even where fresh pages hold zeros.
if(PLDR_SANITIZE OR PLDR_FUZZ)
  add_compile_definitions(PLDR_POISON_UNINIT)
endif()
