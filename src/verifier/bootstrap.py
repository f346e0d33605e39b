# A candidate's entry point on the fresh path (one interpreter per candidate), embedded in bestofn
# at build time and run as `python3 -I -c` in the sandbox (src/verifier/sandbox.cpp). The token
# arrives on fd 5; only if the program returns normally, in the process that started it, does the
# token go to fd 3, the verifier's channel.
import os, sys
def _bestofn_run(write=os.write, getpid=os.getpid):  # bound now: a program may replace them
    token = os.read(5, 64)
    os.close(5)
    main = getpid()
    with open('prog.py') as f:
        code = compile(f.read(), 'prog.py', 'exec')
    exec(code, {})
    if getpid() != main:
        return
    try:
        write(3, token)
    except OSError:
        sys.stderr.write("\nthe program closed the verifier's channel (fd 3): its tests returned, but that cannot be proven\n")
        raise SystemExit(1)
_bestofn_run()
