"""The trusted launcher: the first code of the fresh interpreter that runs one program under test.

The trainer starts ``python -I -S -B -c <stub>`` with plain_data's source and this one, compiled
in the trainer, as the stub's last argument; the source is the package's, read from its files,
never the program's. The launcher reads its configuration from the
trainer's request pipe, then, in order: sets the parent-death signal, joins the run's cgroup
(``layers["memory_cgroup"]``: its ``cgroup.procs`` files, made by the trainer), the resource limits
(soft = hard), opens what the program may read (as ``O_PATH`` descriptors, while it can), gives up
root for the run's spare uid, enters a user, network and pid namespace where the kernel allows,
and forks. The forked process (the first of its pid namespace: when it ends, every process of the
namespace ends) restricts itself with Landlock, drops every capability, runs the program and serves
calls of its entry point: a request ``[id, args, kwargs]`` in, ``{"kind": "result", "id", "value"}``
or ``{"kind": "error", "id", "type", "detail"}`` out, plain data both ways, on two pipes that are
not stdout. It never sees a test and never says whether one passed.

Standard library only, and no ``from __future__`` line: the trainer prepends plain_data's source.
"""

import builtins
import ctypes
import os
import resource
import signal
import stat
import struct
import sys

try:  # run as the child: plain_data's source comes first and defines these
    frame, decode, HEADER  # noqa: B018
except NameError:  # imported as a package module
    from comlrl_lightning.tasks.coding.plain_data import HEADER, decode, frame

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
READ_ACCESS = 0b1101  # EXECUTE | READ_FILE | READ_DIR
LIST_ACCESS = 0b1000  # READ_DIR: the names in a folder (and beneath it), not the files' contents
FILE_ACCESS = 0b0101  # EXECUTE | READ_FILE (a rule on a file takes file rights only)
WRITE_FILE, TRUNCATE = 1 << 1, 1 << 14
LIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "address_space": resource.RLIMIT_AS,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "processes": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class SetupError(Exception):
    """A step the launcher could not take (a layer the trainer requires, a limit, the uid)."""


def check(result, what):
    if result < 0:
        raise SetupError(f"{what}: {os.strerror(ctypes.get_errno())}")
    return result


def read_exactly(fd, count):
    chunks, left = [], count
    while left:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd):
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    body = read_exactly(fd, HEADER.unpack(header)[0])
    return None if body is None else decode(body)


def write_all(fd, data):
    data = memoryview(data)
    while data:
        data = data[os.write(fd, data) :]


def send(fd, message):
    write_all(fd, frame(message))


def die_with_parent(parent):
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if parent and os.getppid() != parent:
        os._exit(1)


def open_paths(paths):
    """``O_PATH`` descriptors of ``paths`` (those that exist), opened while the launcher is still root."""
    found = []
    for path in paths:
        try:
            found.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
        except OSError:
            pass
    return found


def drop_to(uid):
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def enter_namespaces(wanted, required):
    """The namespaces entered (user, then network and pid inside it); a required one that fails stops."""
    active = {"user_namespace": False, "network_namespace": False, "pid_namespace": False}
    uid, gid = os.getuid(), os.getgid()
    steps = [("user_namespace", CLONE_NEWUSER), ("network_namespace", CLONE_NEWNET), ("pid_namespace", CLONE_NEWPID)]
    for name, flag in steps:
        if not wanted.get(name, True):
            continue
        if libc.unshare(flag) == 0:
            active[name] = True
            if flag == CLONE_NEWUSER:
                for file, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                    with open(f"/proc/self/{file}", "w") as handle:
                        handle.write(text)
        elif required.get(name):
            raise SetupError(f"unshare for the {name.replace('_', ' ')}: {os.strerror(ctypes.get_errno())}")
    return active


def landlock_abi():
    return libc.syscall(LANDLOCK_CREATE_RULESET, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION


def landlock(opened):
    """Restrict this process: read (and execute) beneath ``reads`` and ``files``, list ``listings``,
    read and write ``devices``, everything beneath ``work``; no TCP bind or connect (ABI 4), no signal or abstract
    socket outside the domain (ABI 6). Returns the ABI used."""
    abi = landlock_abi()
    if abi < 1:
        raise SetupError(f"Landlock is not available: {os.strerror(ctypes.get_errno())}")
    every = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
    attr = struct.pack("QQQ", every, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = check(libc.syscall(LANDLOCK_CREATE_RULESET, attr, size, 0), "landlock_create_ruleset")
    device_access = FILE_ACCESS | WRITE_FILE | (TRUNCATE if abi >= 3 else 0)
    rights = {"reads": READ_ACCESS, "listings": LIST_ACCESS, "files": FILE_ACCESS, "devices": device_access}
    rules = [(fd, rights.get(key, every)) for key in (*rights, "work") for fd in opened[key]]
    file_rights = FILE_ACCESS | WRITE_FILE | TRUNCATE | 1 << 15  # what a rule on a file (not a folder) may hold
    for fd, access in rules:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= file_rights
        rule = struct.pack("=Qi", access & every, fd)
        check(libc.syscall(LANDLOCK_ADD_RULE, ruleset, 1, rule, 0), "landlock_add_rule")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    check(libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    os.close(ruleset)
    return abi


def drop_capabilities():
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    check(libc.capset(header, bytes(24)), "capset")


def run_program(config, reply):
    """Compile and run the program; its entry point, or ``None`` after telling the trainer why not."""
    namespace = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(compile(config["program"], "<program>", "exec"), namespace)
    except (SyntaxError, ValueError) as error:
        if isinstance(error, SyntaxError) or "null bytes" in str(error):
            send(reply, {"kind": "stopped", "status": "syntax_error", "detail": describe(error)})
            return None
        send(reply, {"kind": "stopped", "status": "crash", "detail": describe(error)})
        return None
    except MemoryError as error:
        send(reply, {"kind": "stopped", "status": "memory", "detail": describe(error)})
        return None
    except BaseException as error:  # SystemExit too: the program ran no test
        send(reply, {"kind": "stopped", "status": "crash", "detail": describe(error)})
        return None
    entry = namespace.get(config["entry_point"])
    if not callable(entry):
        send(reply, {"kind": "stopped", "status": "missing_entry_point", "detail": config["entry_point"]})
        return None
    return entry


def describe(error):
    try:
        return f"{type(error).__name__}: {str(error)[:200]}"
    except BaseException:
        return type(error).__name__


def serve(entry, requests, reply):
    while True:
        request = receive(requests)
        if request is None:
            os._exit(0)
        ident, args, kwargs = request
        try:
            message = frame({"kind": "result", "id": ident, "value": entry(*args, **kwargs)})
        except BaseException as error:
            name = type(error).__name__ if type(error).__name__.isidentifier() else "Exception"
            message = frame({"kind": "error", "id": ident, "type": name[:60], "detail": describe(error)})
        write_all(reply, message)


def through_fds(folders, fds, packages):
    """The import path through the descriptors opened as root (the folders may lie beneath one the
    spare uid cannot enter), for new imports and for the packages imported at startup."""
    moved = {os.path.realpath(folder): f"/proc/self/fd/{fd}" for folder, fd in zip(folders, fds)}

    def through(entry):
        real = os.path.realpath(entry)
        for folder, link in moved.items():
            if real == folder or real.startswith(folder + os.sep):
                return link + real[len(folder) :]
        return entry

    for module in list(sys.modules.values()):
        path = getattr(module, "__path__", None)
        if isinstance(path, list):
            path[:] = [through(entry) for entry in path]
    sys.path[:] = [*moved.values(), packages]
    sys.path_importer_cache.clear()


def program_process(config, opened, requests, reply, active):
    """The forked process: its own restrictions, then the program and its calls."""
    die_with_parent(0)
    if config["layers"].get("landlock", True):
        try:
            abi = landlock(opened)
            active.update(landlock=True, landlock_network=abi >= 4, landlock_signals=abi >= 6)
        except SetupError:
            if config["required"].get("landlock"):
                raise
    if active["user_namespace"]:
        drop_capabilities()
    for key in ("reads", "listings", "files", "devices", "work"):
        for fd in opened[key]:
            os.close(fd)
    limit = config["limits"]["open_files"]
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    through_fds(config["path"], opened["path"], config["packages_dir"])
    sys.argv[:] = ["program"]
    entry = run_program(config, reply)
    if entry is not None:
        send(reply, {"kind": "ready", "layers": active})
        serve(entry, requests, reply)
    os._exit(0)


def prepare(config):
    """As root (or the user): the limits, the descriptors of what the program may read, the uid."""
    packages = config["packages_dir"]
    os.makedirs(packages, exist_ok=True)
    opened = {key: open_paths(config[key]) for key in ("reads", "listings", "files", "devices", "work", "path")}
    opened["links"] = []
    for name, directory in config["packages"]:
        fds = open_paths([directory])
        if fds:
            opened["links"].append(fds[0])  # kept open: the link below points through it
            os.symlink(f"/proc/self/fd/{fds[0]}", os.path.join(packages, name))
            opened["reads"].append(os.open(directory, os.O_PATH | os.O_CLOEXEC))
    for name, value in config["limits"].items():
        if name not in ("open_files", "processes"):  # set later (see main and program_process)
            resource.setrlimit(LIMITS[name], (value, value))
    uid = config["uid"]
    if uid is not None:
        drop_to(uid)
    return opened


def join_cgroup(procs_files, required):
    """Move this process into the run's cgroup (before it forks: everything the run starts is
    inside); whether it joined. One that cannot be joined stops a run that requires it."""
    for path in procs_files:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        except OSError as error:
            if required:
                raise SetupError(f"joining the run's cgroup {path}: {error.strerror}") from None
            return False
    return bool(procs_files)


def limit_processes(limit, shared_uid, in_cgroup):
    """``RLIMIT_NPROC``, set once the run has its own uid or user namespace (where the count starts
    at the run's own processes); with neither, above the tasks the user runs already. Outside a
    cgroup (nothing bounds the memory of a run's processes together) the program may start no
    process or thread: the launcher and the program are the run, and ``RLIMIT_AS`` bounds each."""
    if not in_cgroup:
        limit = 1 if shared_uid else 2
    if shared_uid:
        uid = os.getuid()
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                    limit += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                pass
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))


def main():
    parent, requests, reply = (int(value) for value in sys.argv[2:5])
    die_with_parent(parent)
    config = receive(requests)
    active = {"spare_uid": False, "landlock": False, "landlock_network": False, "landlock_signals": False}
    try:
        groups = config["layers"].get("memory_cgroup") or []
        active["memory_cgroup"] = join_cgroup(groups, config["required"].get("memory_cgroup"))
        opened = prepare(config)
        active["spare_uid"] = config["uid"] is not None
        die_with_parent(parent)  # a change of uid clears the parent-death signal
        active.update(enter_namespaces(config["layers"], config["required"]))
        shared_uid = not (active["spare_uid"] or active["user_namespace"])
        limit_processes(config["limits"]["processes"], shared_uid, active["memory_cgroup"])
        child = os.fork()
        if child == 0:
            try:
                program_process(config, opened, requests, reply, active)
            except SetupError as error:
                send(reply, {"kind": "setup_error", "detail": str(error)})
            os._exit(0)
    except (SetupError, OSError) as error:
        send(reply, {"kind": "setup_error", "detail": describe(error)})
        os._exit(0)
    os.close(requests)
    os.close(reply)
    status = os.waitpid(child, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


if __name__ == "__main__" and sys.argv[1:2] == ["comlrl-test-runner"]:
    main()
