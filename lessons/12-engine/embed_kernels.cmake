# Writes the fatbinary INPUT as a C source (OUTPUT) defining the bytes the program embeds:
#   lesson12_kernel_image[], lesson12_kernel_image_size, lesson12_kernel_targets[]
# Run by CMakeLists.txt at build time: cmake -DINPUT=... -DOUTPUT=... -DTARGETS=... -P this file.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){24})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}"
     "// Generated from ${INPUT} by embed_kernels.cmake: do not edit.\n"
     "extern \"C\" {\n"
     "extern const unsigned char lesson12_kernel_image[];\n"
     "extern const unsigned long long lesson12_kernel_image_size;\n"
     "extern const char lesson12_kernel_targets[];\n"
     "const unsigned char lesson12_kernel_image[] = {\n${bytes}\n};\n"
     "const unsigned long long lesson12_kernel_image_size = ${size}ULL;\n"
     "const char lesson12_kernel_targets[] = \"${TARGETS}\";\n"
     "}\n")
