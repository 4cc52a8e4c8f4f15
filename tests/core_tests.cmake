# The core runtime's tests: one file per public header, each its own CTest entry with a timeout.
# Tests that start threads carry the `concurrent` label. Each file should finish in a few seconds;
# the timeouts leave room for sanitizer builds, and every threaded test case also has a watchdog
# (tests/watchdog.hpp) that names the case that hung.
courier_add_test(core_error error.test.cpp TIMEOUT 30)
courier_add_test(core_pool pool.test.cpp TIMEOUT 60 LABELS concurrent)
courier_add_test(core_mailbox mailbox.test.cpp TIMEOUT 60 LABELS concurrent)
courier_add_test(core_bounded bounded.test.cpp TIMEOUT 90 LABELS concurrent)
courier_add_test(core_actor actor.test.cpp TIMEOUT 90 LABELS concurrent)
courier_add_test(core_actor_ref actor_ref.test.cpp TIMEOUT 90 LABELS concurrent)
courier_add_test(core_system system.test.cpp TIMEOUT 90 LABELS concurrent)
courier_add_test(core_scheduler scheduler.test.cpp TIMEOUT 90 LABELS concurrent)
courier_add_test(core_message message.test.cpp TIMEOUT 30)
courier_add_test(core_courier courier.test.cpp TIMEOUT 60 LABELS concurrent)
