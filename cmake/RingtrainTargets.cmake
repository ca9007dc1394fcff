# Helpers that give every ringtrain target the same settings.

# ringtrain_library(NAME SOURCES... DEPS ...): a folder's static library. Includes are written
# from the repository root ("base/status.h").
function(ringtrain_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${RINGTRAIN_WARNINGS}>)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(RINGTRAIN_FAULT_INJECTION)
    target_compile_definitions(${name} PUBLIC RINGTRAIN_FAULT_INJECTION=1)
  endif()
endfunction()

# ringtrain_executable(NAME SOURCES... DEPS ...): a binary of ours.
function(ringtrain_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${RINGTRAIN_WARNINGS}>)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# ringtrain_test(NAME SOURCES... DEPS ... [LABELS ...] [TIMEOUT s]): one GoogleTest binary
# registered with ctest (each test case a ctest test, so failures are named). Listing the cases
# loads every linked library (cuBLAS alone is hundreds of MiB), which takes seconds from a cold page
# cache on a fresh machine: hence a discovery timeout far above CMake's default of 5 s.
set(RINGTRAIN_TEST_DISCOVERY_TIMEOUT 120)
include(GoogleTest)
function(ringtrain_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  ringtrain_executable(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT ${RINGTRAIN_TEST_DISCOVERY_TIMEOUT}
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
endfunction()
