# Builds and runs tests/packaging/consumer against mpg, as a ctest step (cmake -P).
#   MODE=find_package      configure + install mpg to WORK_DIR/prefix, consume it from there
#   MODE=add_subdirectory  consume the source tree directly; mpg must add no tests/bench/examples
# Inputs: MODE, MPG_SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, CXX_FLAGS, BUILD_TYPE, and
# EIGEN3_DIR (may be empty).
cmake_minimum_required(VERSION 3.16)

set(consumer_source ${CMAKE_CURRENT_LIST_DIR}/consumer)
set(common_args -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
                "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
if(EIGEN3_DIR)
  list(APPEND common_args -DEigen3_DIR=${EIGEN3_DIR})
endif()

# Runs one step and stops the test with its output if the step fails.
function(run_step name)
  message(STATUS "[${MODE}] ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "[${MODE}] ${name} failed (${result}):\n${output}")
  endif()
  set(last_output "${output}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(consumer_build ${WORK_DIR}/consumer-build)

if(MODE STREQUAL "find_package")
  set(prefix ${WORK_DIR}/prefix)
  run_step("configure mpg" ${CMAKE_COMMAND} -S ${MPG_SOURCE_DIR} -B ${WORK_DIR}/mpg-build
           ${common_args} -DCMAKE_INSTALL_PREFIX=${prefix} -DMPG_BUILD_TESTS=OFF
           -DMPG_BUILD_BENCHMARKS=OFF -DMPG_BUILD_EXAMPLES=OFF)
  run_step("build mpg" ${CMAKE_COMMAND} --build ${WORK_DIR}/mpg-build)
  run_step("install mpg" ${CMAKE_COMMAND} --install ${WORK_DIR}/mpg-build)
  file(GLOB_RECURSE config_files ${prefix}/*/mpgConfig.cmake ${prefix}/*/mpgConfigVersion.cmake
       ${prefix}/*/mpgTargets.cmake)
  list(LENGTH config_files num_config_files)
  if(NOT EXISTS ${prefix}/include/mpg/mpg.hpp OR NOT EXISTS ${prefix}/include/mpg/detail
     OR NOT EXISTS ${prefix}/include/mpg/acl_host/acl/acl.h
     OR NOT EXISTS ${prefix}/share/licenses/mpg/LICENSE OR NOT num_config_files EQUAL 3)
    message(FATAL_ERROR "install to ${prefix} is missing headers, LICENSE or package files")
  endif()
  # pkg-config from the same prefix: mpg.pc's version is the header's, and its flags alone
  # build a program (Eigen's through Requires: eigen3).
  if(NOT EXISTS ${prefix}/share/pkgconfig/mpg.pc OR NOT EXISTS ${prefix}/share/doc/mpg/contract.md)
    message(FATAL_ERROR "install to ${prefix} is missing share/pkgconfig/mpg.pc or the contract")
  endif()
  find_program(pkg_config pkg-config)
  if(pkg_config)
    set(ENV{PKG_CONFIG_PATH} "${prefix}/share/pkgconfig:$ENV{PKG_CONFIG_PATH}")
    file(STRINGS ${MPG_SOURCE_DIR}/include/mpg/version.hpp version_lines
         REGEX "^#define MPG_VERSION_(MAJOR|MINOR|PATCH) ")
    string(REGEX MATCHALL "[0-9]+" header_version "${version_lines}")
    string(REPLACE ";" "." header_version "${header_version}")
    run_step("pkg-config --modversion mpg" ${pkg_config} --modversion mpg)
    string(STRIP "${last_output}" pc_version)
    if(NOT pc_version STREQUAL header_version)
      message(FATAL_ERROR "mpg.pc says ${pc_version}, version.hpp says ${header_version}")
    endif()
    run_step("pkg-config consumer" sh -c
             "${CXX_COMPILER} -std=c++17 $(pkg-config --cflags mpg) \
${CMAKE_CURRENT_LIST_DIR}/pkg_config_consumer.cpp -o ${WORK_DIR}/pkg_config_consumer $(pkg-config --libs mpg) \
&& ${WORK_DIR}/pkg_config_consumer")
    message(STATUS "[${MODE}] ${last_output}")
  else()
    message(STATUS "[${MODE}] pkg-config not found: mpg.pc installed but not exercised")
  endif()
  run_step("configure consumer" ${CMAKE_COMMAND} -S ${consumer_source} -B ${consumer_build}
           ${common_args} -DCMAKE_PREFIX_PATH=${prefix} -DMPG_CONSUMER_MODE=find_package)
  # The version file must refuse another major version.
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${consumer_source} -B ${WORK_DIR}/wrong-version
                          ${common_args} -DCMAKE_PREFIX_PATH=${prefix}
                          -DMPG_CONSUMER_MODE=find_package -DMPG_CONSUMER_VERSION=2.0
                  RESULT_VARIABLE result OUTPUT_QUIET ERROR_QUIET)
  if(result EQUAL 0)
    message(FATAL_ERROR "find_package(mpg 2.0) succeeded against mpg 1.x")
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  run_step("configure consumer" ${CMAKE_COMMAND} -S ${consumer_source} -B ${consumer_build}
           ${common_args} -DMPG_CONSUMER_MODE=add_subdirectory -DMPG_SOURCE_DIR=${MPG_SOURCE_DIR})
  foreach(dir tests bench examples)
    if(EXISTS ${consumer_build}/mpg/${dir})
      message(FATAL_ERROR "mpg's ${dir}/ was configured although mpg is a subproject")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "MODE must be find_package or add_subdirectory, not '${MODE}'")
endif()

run_step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run_step("run consumer" ${consumer_build}/consumer)
message(STATUS "[${MODE}] ${last_output}")
run_step("run acl_host consumer" ${consumer_build}/acl_host_consumer)
message(STATUS "[${MODE}] ${last_output}")
