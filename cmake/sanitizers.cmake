# AddressSanitizer + UndefinedBehaviorSanitizer for the whole build (PLDR_SANITIZE=ON).
if(PLDR_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()
