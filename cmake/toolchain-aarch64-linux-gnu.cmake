# Cross-compiles mpg for arm64 Linux with Debian's g++-aarch64-linux-gnu; the test binaries run
# under user-mode emulation (qemu-aarch64 from Debian's qemu-user), so ctest and
# gtest_discover_tests work unchanged. Used by .ci/arm64.sh:
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
#     -DGTest_DIR=<GoogleTest built for arm64>/lib/cmake/GTest
# Eigen is headers only and architecture-independent: the host's /usr/include/eigen3 is used.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(MPG_CROSS_TRIPLE aarch64-linux-gnu)
set(MPG_CROSS_SYSROOT /usr/${MPG_CROSS_TRIPLE})  # the target's libc, libstdc++ and loader
set(CMAKE_C_COMPILER ${MPG_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${MPG_CROSS_TRIPLE}-g++)

find_program(MPG_QEMU_AARCH64 qemu-aarch64)
if(MPG_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MPG_QEMU_AARCH64} -L ${MPG_CROSS_SYSROOT})
endif()

# Libraries and headers of the target only; programs of the host; packages (CMake config files)
# from both, so that Eigen3's architecture-independent config in /usr/share is found.
set(CMAKE_FIND_ROOT_PATH ${MPG_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
