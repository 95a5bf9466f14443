# cmake -DIN=FILE -DOUT=HEADER -DNAME=IDENTIFIER -P embed_text.cmake
#
# Writes HEADER: a C++ header that holds FILE's text as one raw string literal,
#   inline constexpr char IDENTIFIER[] = R"glass_embed(...FILE...)glass_embed";
# so a program can carry a file (glass serve's page, tools/serve_page.html) without reading it at
# run time. The header is rewritten only when its text changes (no needless rebuilds).
if(NOT DEFINED IN OR NOT DEFINED OUT OR NOT DEFINED NAME)
  message(FATAL_ERROR "usage: cmake -DIN=FILE -DOUT=HEADER -DNAME=IDENTIFIER -P embed_text.cmake")
endif()
file(READ "${IN}" text)
string(FIND "${text}" ")glass_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string's end marker )glass_embed\" at offset ${clash}")
endif()
set(header "// Generated from ${IN} by cmake/embed_text.cmake: edit that file, not this one.\n#pragma once\n\ninline constexpr char ${NAME}[] = R\"glass_embed(${text})glass_embed\";\n")
file(WRITE "${OUT}.tmp" "${header}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
