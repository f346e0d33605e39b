# The per-worker zygote (src/verifier/sandbox.cpp starts it; its protocol is described there),
# embedded in bestofn at build time (cmake/EmbedFile.cmake) and run as `python3 -I -c` in the
# sandbox's namespaces and minimal root. fd 3: its socket to bestofn; fd 5: the zygote helper
# (zygote_helper.cpp) in a memfd; argv: the tmpfs mount options, "1" if its IPC namespace cannot
# hold objects, "1" if /dev/shm is its own tmpfs.
import os, sys, socket, select, resource, ctypes, traceback, errno
import array, base64, bisect, collections, copy, dataclasses, decimal, fractions, functools, hashlib
import heapq, itertools, json, math, operator, random, re, statistics, string, typing
if os.getpid() != 1:
    os.write(3, b'error: the zygote is not the init of a PID namespace')
    os._exit(2)

class _Job(ctypes.Structure):  # struct bestofn_job
    _fields_ = [('src', ctypes.c_void_p), ('len', ctypes.c_ulong), ('as_extra', ctypes.c_ulong),
                ('uid', ctypes.c_uint), ('token', ctypes.c_char * 72)]

class _Zygote(ctypes.Structure):  # struct bestofn_zygote
    _fields_ = [('sock', ctypes.c_int), ('ipc_shared', ctypes.c_int), ('shm', ctypes.c_int),
                ('tmpfs_options', ctypes.c_char_p), ('before_fork', ctypes.c_void_p),
                ('after_fork_parent', ctypes.c_void_p), ('after_fork_child', ctypes.c_void_p)]

try:
    # PyDLL: the GIL stays held in its calls. Through the sandbox's own procfs, which only root
    # reaches (BESTOFN_PRIVATE_PROC, src/verifier/private_proc.h).
    helper = ctypes.PyDLL('/proc/.bestofn/self/fd/5')
    os.close(5)
    def _api(name):
        return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
    zygote = _Zygote(3, sys.argv[2] == '1', sys.argv[3] == '1', sys.argv[1].encode(),
                     _api('PyOS_BeforeFork'), _api('PyOS_AfterFork_Parent'), _api('PyOS_AfterFork_Child'))
except BaseException as e:
    os.write(3, ('error: the zygote helper: %r' % (e,)).encode('utf-8', 'replace')[:200])
    os._exit(2)
job = _Job()
_write, _exit, _getpid = os.write, os._exit, os.getpid  # bound before any candidate runs: a program may replace them

def _exc_text(e):
    # traceback.format_exception_only's text, built here for an exception of a builtin type with
    # no cause, context, notes or sub-exceptions (a failed assert, a wrong index, ...), the same
    # steps as the module's (3.11: str() of the exception, str() of that, then "%s: %s\n" or "%s\n"),
    # without its objects: they cost a failing candidate ~110 page faults of the forked
    # interpreter, a quarter of its whole cost. Anything else goes through the module itself: a
    # class of the candidate's, a SyntaxError, a chain, a group, and the names newer modules add
    # "Did you mean" suggestions to.
    t = type(e)
    if (t.__flags__ & 512 or t.__module__ != 'builtins'  # 512: a heap type, i.e. not builtin
            or issubclass(t, (SyntaxError, BaseExceptionGroup, NameError, AttributeError, ImportError))
            or e.__cause__ is not None or e.__context__ is not None or getattr(e, '__notes__', None) is not None):
        return ''.join(traceback.format_exception_only(t, e))
    try:
        v = str(e)
    except BaseException:
        v = '<exception str() failed>'
    try:
        v = str(v)
    except BaseException:
        v = '<exception str() failed>'
    return '%s\n' % t.__qualname__ if not v else '%s: %s\n' % (t.__qualname__, v)

def _run(src, token):
    status = 0
    main = _getpid()
    try:
        code = compile(src, 'prog.py', 'exec')
        exec(code, {})
        if _getpid() == main:  # not a process the program forked, back from its tests
            try:
                _write(3, token)
            except OSError:
                sys.stderr.write("\nthe program closed the verifier's channel (fd 3): its tests returned, but that cannot be proven\n")
                status = 1
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xff
        else:
            try:
                sys.stderr.write(str(e.code) + '\n')
            except BaseException:
                pass
            status = 1
    except BaseException as e:
        # The exception's own lines, without the stack: bestofn reads only the last line, and
        # extracting the stack reads and parses prog.py again (a third of a failing candidate's
        # cost). For an exception group the last line is then the group's, not its tree's border.
        try:
            sys.stderr.write('\n' + _exc_text(e))  # on a line of its own
        except BaseException:
            pass
        status = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    _exit(status)

os.write(3, b'ready')
r = helper.bestofn_zygote_serve(ctypes.byref(zygote), ctypes.byref(job))
if r != 0:
    os._exit(0 if r == -1 else 3)  # bestofn went away / /tmp could not be renewed
# A candidate's child.
sys.argv[:] = ['-c']  # what a fresh interpreter (the other path) shows, not the zygote's arguments
src = ctypes.string_at(job.src, job.len)
helper.bestofn_zygote_enter(ctypes.byref(job))
def _take_token():  # out of the module's globals: __main__.job no longer holds it
    token = job.token
    ctypes.memset(ctypes.addressof(job), 0, ctypes.sizeof(job))
    return token
_run(src, _take_token())
