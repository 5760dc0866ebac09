# ctest driver of mpi_checkpoint_2_instances_to_1 (tests/CMakeLists.txt): checkpoint_program save under
# weftrun with 2 instances of 4 replicas, then checkpoint_program verify in one process of 8 replicas, then
# checkpoint_program refused under weftrun (a save instance 0 cannot write fails everywhere, the job goes on).
# Inputs: WEFTRUN, PROGRAM, DIR (emptied first). Fails unless both steps exit 0.
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
execute_process(COMMAND ${WEFTRUN} --num-instances 2 --num-replicas 8 ${PROGRAM} save ${DIR}
                RESULT_VARIABLE save_rc)
if(NOT save_rc EQUAL 0)
  message(FATAL_ERROR "saving under weftrun failed (exit ${save_rc})")
endif()
execute_process(COMMAND ${PROGRAM} verify ${DIR} RESULT_VARIABLE verify_rc)
if(NOT verify_rc EQUAL 0)
  message(FATAL_ERROR "the checkpoints of 2 instances and of 1 process differ (exit ${verify_rc})")
endif()
execute_process(COMMAND ${WEFTRUN} --num-instances 2 --num-replicas 8 ${PROGRAM} refused ${DIR}
                RESULT_VARIABLE refused_rc)
if(NOT refused_rc EQUAL 0)
  message(FATAL_ERROR "a save that instance 0 could not write was not refused as expected (exit ${refused_rc})")
endif()
