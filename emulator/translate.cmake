# emulator/translate.cmake — turns a .cu file into C++ that g++ compiles against emulator.hpp.
#   cmake -DIN=cuda/attention.cu -DOUT=build/.../attention.cpp -P translate.cmake
# Two rewrites, each keeping every newline where it was (so #line 1 keeps all line numbers right):
#   kernel<<<config>>>(args)   ->  ::glass_emu::launch("kernel",
#                                      ::glass_emu::LaunchConfig(config).on(GLASS_EMU_STREAM_ZERO),
#                                      [](auto... a) { kernel(a...); }, args)
#   extern __shared__ T name[];  ->  T* name = ::glass_emu::dynamic_shared<T>();
# The generic lambda lets the compiler deduce a kernel template's arguments, as nvcc does.
# A launch or extern __shared__ these patterns miss stops the build, naming the file.
if(NOT IN OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DIN=file.cu -DOUT=file.cpp -P translate.cmake")
endif()
file(READ "${IN}" src)

set(name "([A-Za-z_][A-Za-z_0-9]*(<[^<>;]*>)?)")
set(ws "([ \t\r\n]*)")
set(lambda "[](auto... glass_arg) { \\1(glass_arg...); }")
# Launches without arguments first, then the rest.
string(REGEX REPLACE "${name}${ws}<<<([^;]*)>>>${ws}\\(${ws}\\)"
       "::glass_emu::launch(\"\\1\",\\3::glass_emu::LaunchConfig(\\4).on(GLASS_EMU_STREAM_ZERO), ${lambda}\\5\\6)" src "${src}")
string(REGEX REPLACE "${name}${ws}<<<([^;]*)>>>${ws}\\("
       "::glass_emu::launch(\"\\1\",\\3::glass_emu::LaunchConfig(\\4).on(GLASS_EMU_STREAM_ZERO), ${lambda},\\5" src "${src}")
string(REGEX REPLACE "extern[ \t]+__shared__[ \t]+([A-Za-z_][A-Za-z_0-9:]*)[ \t]+([A-Za-z_][A-Za-z_0-9]*)[ \t]*\\[[ \t]*\\][ \t]*;"
       "\\1* \\2 = ::glass_emu::dynamic_shared<\\1>();" src "${src}")

foreach(leftover "<<<" "extern __shared__")
  string(FIND "${src}" "${leftover}" at)
  if(NOT at EQUAL -1)
    string(SUBSTRING "${src}" ${at} 80 context)
    message(FATAL_ERROR "translate.cmake: ${IN}: cannot translate '${context}...'")
  endif()
endforeach()

set(out "// Generated from ${IN} by emulator/translate.cmake. Do not edit.\n#line 1 \"${IN}\"\n${src}")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL out)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${out}")
