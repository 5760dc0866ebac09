# The output checkers of the mpi tests must fail when the program fails (issue 8, item 12): each is run on
# a stand-in program whose output would satisfy the patterns, and must reject the wrong exit status.
#   cmake -DSOURCE_DIR=<tests dir> -DWORK_DIR=<scratch dir> -P checkers.cmake
file(MAKE_DIRECTORY ${WORK_DIR})
# stand_in(name body): a shell script ${WORK_DIR}/name running body.
function(stand_in name body)
  file(WRITE ${WORK_DIR}/${name} "#!/bin/sh\n${body}\n")
  file(CHMOD ${WORK_DIR}/${name} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
endfunction()
set(report "echo '\"instances\": 2, \"wrong\": 0'")
stand_in(good "${report}")
stand_in(report_then_fail "${report}; exit 1")
stand_in(crash "${report}; kill -9 $$")
stand_in(fault "echo boom-3; exit 1")
stand_in(fault_but_exit_0 "echo boom-3")
stand_in(slow_fault "echo boom-3; sleep 2; exit 1")

function(expect_checker outcome script program patterns)
  execute_process(COMMAND ${CMAKE_COMMAND} -DCOMMAND=${WORK_DIR}/${program} -DPATTERNS=${patterns} ${ARGN}
                          -P ${SOURCE_DIR}/${script}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(outcome STREQUAL "passes" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${script} on ${program} failed, expected it to pass:\n${out}${err}")
  elseif(outcome STREQUAL "fails" AND rc EQUAL 0)
    message(FATAL_ERROR "${script} on ${program} passed, expected it to fail:\n${out}${err}")
  endif()
endfunction()

# expect_success: the status counts, and so does every pattern.
expect_checker(passes mpi/expect_success.cmake good "\"instances\": ?2")
expect_checker(fails mpi/expect_success.cmake report_then_fail "\"instances\": ?2")
expect_checker(fails mpi/expect_success.cmake crash "\"instances\": ?2")
expect_checker(fails mpi/expect_success.cmake good "\"instances\": ?3")
# expect_fault: a job that succeeds, is too slow, or says something else fails the test.
expect_checker(passes mpi/expect_fault.cmake fault "boom-3" -DSECONDS=10 -DMARKER=no-such-process-name)
expect_checker(fails mpi/expect_fault.cmake fault_but_exit_0 "boom-3" -DSECONDS=10 -DMARKER=no-such-process-name)
expect_checker(fails mpi/expect_fault.cmake slow_fault "boom-3" -DSECONDS=0 -DMARKER=no-such-process-name)
expect_checker(fails mpi/expect_fault.cmake fault "boom-4" -DSECONDS=10 -DMARKER=no-such-process-name)
message(STATUS "expect_success.cmake and expect_fault.cmake reject failed, slow and wrong runs")
