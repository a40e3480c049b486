# FeedguardVm.cmake — feedguard_vm_test(): registers a ctest that runs a gtest binary inside a qemu VM
# (tests/vm/run_in_vm.sh) with cgroup v2 at /sys/fs/cgroup and every controller enabled.
#
# Callers (any CMakeLists.txt, in any folder):
#   include(${CMAKE_SOURCE_DIR}/tests/vm/FeedguardVm.cmake)
#   feedguard_vm_test(<test name> <executable target> [ARGS...]
#                     [ENV K=V ...] [FILES SRC[:DST] ...] [TIMEOUT seconds] [LABELS ...])
#
# ARGS go to the binary (e.g. --gtest_filter=Foo.*). Inside the VM the binary also sees FEEDGUARD_VM=1
# and FEEDGUARD_CGROUP2_ROOT=/sys/fs/cgroup; tests that need cgroup v2 should GTEST_SKIP() when
# FEEDGUARD_CGROUP2_ROOT is unset, so the same binary can also be run on the host.
# The ctest has label "vm" (plus LABELS), exits 77 (= skipped) when qemu/kernel/busybox are absent, and
# the whole gtest binary runs in one boot (~3 s boot on a 2-core host; tcg).
include_guard(GLOBAL)
set_property(GLOBAL PROPERTY FEEDGUARD_VM_RUNNER "${CMAKE_CURRENT_LIST_DIR}/run_in_vm.sh")

function(feedguard_vm_test name target)
  cmake_parse_arguments(V "" "TIMEOUT" "ENV;FILES;LABELS" ${ARGN})
  get_property(runner GLOBAL PROPERTY FEEDGUARD_VM_RUNNER)
  if(NOT V_TIMEOUT)
    set(V_TIMEOUT 180)
  endif()
  set(opts --timeout ${V_TIMEOUT} --cache-dir ${CMAKE_BINARY_DIR}/vm-cache)
  foreach(e IN LISTS V_ENV)
    list(APPEND opts --env ${e})
  endforeach()
  foreach(f IN LISTS V_FILES)
    list(APPEND opts --file ${f})
  endforeach()
  add_test(NAME ${name} COMMAND ${runner} ${opts} -- $<TARGET_FILE:${target}> ${V_UNPARSED_ARGUMENTS})
  math(EXPR ctest_timeout "${V_TIMEOUT} + 30")
  set_tests_properties(${name} PROPERTIES LABELS "vm;${V_LABELS}" TIMEOUT ${ctest_timeout}
                                          SKIP_RETURN_CODE 77 PROCESSORS 2)
endfunction()
