// A weft program for the multi-process fault tests (reliability R1, R2, R3, R8, R26) and the fault soak test.
// Faults at a collective come from WEFT_FAULT (docs/reliability.md, "Fault injection") on the generic run:
//   fault_program ok      : 20 steps of psum, then prints the result; with WEFT_FAULT="replica=3:at=5:throw",
//                           "instance=1:at=5:kill", "replica=2:at=5:hang", "instance=1:at=5:signal=STOP", ...
//                           it is the program of every injected fault
// What WEFT_FAULT cannot say (the end of a program, a failure before the runtime starts, a program that
// catches the error) stays a mode of its own:
//   fault_program absent  : instance 1 exits before it starts the runtime
//   fault_program catch   : like ok, but instance 1 catches the error of its pmap call (WEFT_FAULT makes one)
//                           and lingers 30 s before exiting: the others must not wait for it (the failure is
//                           announced to every instance)
//   fault_program return  : instance 1 returns from main after the first pmap call while instance 0 makes a
//                           second one (its replicas wait in a psum for instance 1's, which never come)
//   fault_program exit    : the same with exit(0) instead of returning
//   fault_program _exit   : the same with _exit(0) (no destructors, no MPI_Finalize)
//   fault_program linger  : instance 1 returns after the first call, instance 0 computes 3 s more without
//                           collectives, then returns: a clean run (the leaver waits for it at exit)
//   fault_program hang_at_end : like linger, but instance 0 sleeps 60 s: the leaver waits for it at most
//                           WEFT_COLLECTIVE_TIMEOUT, then ends the job naming it
// Further arguments are ignored (the soak test marks its runs with one).
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <chrono>
#include <thread>

#include <weft/weft.hpp>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mode == "absent" && rank && std::string(rank) == "1") return 3;  // never reaches the runtime
  weft::Runtime rt;
  auto steps = weft::pmap(
      [&](weft::Replica& r, const weft::Array& x) {
        weft::Array acc = x;
        for (int step = 0; step < 20; ++step) acc = r.psum(acc, "i") / static_cast<double>(r.num_replicas());
        return acc;
      },
      {.axis = "i", .runtime = &rt});
  weft::Array local = weft::Array::ones({rt.local_device_count(), 4});
  if (mode == "catch" && rt.process_index() == 1) {
    try {
      steps(local);
    } catch (const std::exception& e) {
      std::cerr << "caught: " << e.what() << std::endl;
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 1;
    }
  }
  if (mode == "ok") {
    // The error of an injected fault, printed by the program as a user's would (weft prints it only when
    // several instances run); the process then ends with status 1.
    try {
      const weft::Array sum = steps(local).to_host().sum();
      std::cout << "result " << sum << std::endl;
    } catch (const std::exception& e) {
      std::cerr << "fault_program: error: " << e.what() << std::endl;
      return 1;
    }
    return 0;
  }
  std::cout << "result " << steps(local).to_host().sum() << std::endl;
  if (rt.process_index() == 1) {
    if (mode == "return" || mode == "linger" || mode == "hang_at_end") return 0;
    if (mode == "exit") std::exit(0);
    if (mode == "_exit") _exit(0);
  }
  if (mode == "return" || mode == "exit" || mode == "_exit")
    std::cout << "second result " << steps(local).to_host().sum() << std::endl;
  if (mode == "linger") std::this_thread::sleep_for(std::chrono::seconds(3));
  if (mode == "hang_at_end") std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}
