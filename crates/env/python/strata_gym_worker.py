"""Strata's Gymnasium worker process: steps k environments for one Rust rollout worker.

Started by Strata (strata_env::gym), never by hand: the program arrives on stdin, the
arguments name file descriptors the parent left open. Two modes:

- ``--describe``: make one env, write its layout (spaces, flattening, time limit) as a
  length-prefixed JSON message to the socket (``--reply-fd``), exit.
- serving: make ``--envs`` envs, map the shared-memory region (``--shm-fd``), answer "ready"
  (``K``, or ``E`` and a length-prefixed traceback), then run the commands Strata posts in
  the region's header (step, reset or quit all envs) and mark each done there.

Nothing is pickled on the hot path: actions, observations, rewards, flags, final
observations and env clocks live in the region. A command is a sequence number in the
header, which this process spins on for up to the header's spin budget, plus a byte on the
socket (``--cmd-fd``) that wakes it once it sleeps; a command done is the done number in
the header plus a ``K`` byte on ``--reply-fd`` that wakes a sleeping Strata. A failed
command leaves its traceback in the region's error area. Each env is
stepped on its own and reset in the same step when its episode ends (Gymnasium's
"same-step" autoreset), keeping the final observation for bootstrapping. The env clock is
this process's count of the env's steps, across episodes.

Named wrappers (``--wrappers``, defined in strata_gym_wrappers.py, whose source comes
first in this program) are applied to every env made. With ``--record-file``, env 0's
picture (``render()``; Strata makes the env with ``render_mode="rgb_array"``) is appended
to that file after every reset and step.

The region layout must match strata_env's (crates/env/src/gym/region.rs): a 64-byte
header, then arrays at 64-byte aligned offsets in the order of ``REGION_ARRAYS``, then the
error area.
"""
import argparse
import gc
import importlib
import json
import mmap
import os
import select
import signal
import struct
import sys
import time
import traceback

PROTOCOL = 4
# The protocol's bytes (crates/env/src/gym/protocol.rs spells the same): commands posted
# in the header and sent on the command socket, one-byte replies on the reply socket.
COMMAND_STEP = b"S"
COMMAND_RESET = b"R"
COMMAND_QUIT = b"Q"
REPLY_DONE = b"K"
REPLY_FAILED = b"E"
MAGIC = 0x47525453  # "STRG" little-endian
HEADER = 64
# Header words after magic, protocol, k, the observations' float width and the action
# width (byte offsets); the observations' byte width (their images) is the word at 56.
SPIN_NS, CMD_CODE, CMD_SEQ, DONE_SEQ, FAILED, OBS_BYTES = 20, 24, 32, 40, 48, 56
ERROR_BYTES = 64 * 1024  # a failed command's traceback: u32 length, then UTF-8
ERROR_TEXT_MAX = 60 * 1024
# Stale wake-up bytes (of commands seen while spinning) are drained every so many commands.
DRAIN_EVERY = 256
# name, dtype, values per env ("obs": the observation's values outside images, "pix": its
# image values, "act": action width)
REGION_ARRAYS = [
    ("actions", "f4", "act"),
    ("obs", "f4", "obs"),
    ("obs_pixels", "u1", "pix"),
    ("final_obs", "f4", "obs"),
    ("final_pixels", "u1", "pix"),
    ("rewards", "f8", 1),
    ("clock", "u8", 1),
    ("seeds", "u8", 1),
    ("terminated", "u1", 1),
    ("truncated", "u1", 1),
    ("success", "u1", 1),  # 0: the env does not say, 1: failed, 2: succeeded
    ("game_return", "f8", 1),
    ("game_length", "u8", 1),
    # 0: an episode's end is the episode users count; 1: a life lost, the game goes on
    # (the `atari` wrapper); 2: the game ended, its raw score and steps in game_return and
    # game_length.
    ("game_over", "u1", 1),
]


def align(n):
    return (n + 63) // 64 * 64


def region_views(np, buf, k, widths):
    """Numpy views of the region's arrays (rows per env for the vector-valued ones);
    `widths` maps "obs", "pix" and "act" to their widths."""
    views, offset = {}, HEADER
    for name, dtype, per in REGION_ARRAYS:
        width = widths.get(per, per)
        view = np.frombuffer(buf, dtype=np.dtype(dtype), count=k * width, offset=offset)
        views[name] = view.reshape(k, width) if isinstance(per, str) else view
        offset = align(offset + k * width * np.dtype(dtype).itemsize)
    views["error"] = np.frombuffer(buf, dtype=np.uint8, count=ERROR_BYTES, offset=offset)
    return views


# --- spaces -------------------------------------------------------------------------


class Flat:
    """How one space is flattened: its values outside images as f32 (`fdim` of them),
    its image values as bytes (`bdim`), `dim` in all; a description; a writer of one
    value into a float row and a byte row; the images (offsets in the whole row, relative
    to this space's start)."""

    def __init__(self, fdim, text, write, images=(), bdim=0):
        self.fdim, self.bdim, self.dim = fdim, bdim, fdim + bdim
        self.text, self.write, self.images = text, write, list(images)


def channels_order(shape):
    """Where a 3-D image's channels are: "hwc" when its last axis is the smallest (as
    Gymnasium gives images; ties too), "chw" when its first is (as after a transpose for
    PyTorch, or a grey frame stack), None when it is the middle one."""
    h, w, c = shape
    if c <= h and c <= w:
        return "hwc"
    if h < c and h <= w:
        return "chw"
    return None


def image_layout(np, space):
    """How a Box of bytes or booleans is an image: (height, width, channels, order, the
    axis permutation to channels-last, scale), or None when it is not one. 2-D is one
    channel; 3-D channels-last or channels-first; 4-D a frame stack (Gymnasium's
    FrameStackObservation puts the stack first), its frames' channels stacked."""
    if np.dtype(space.dtype) not in (np.dtype(np.uint8), np.dtype(np.bool_)):
        return None
    shape = tuple(int(n) for n in space.shape)
    # Bytes in 0..255 are divided by 255 in the model; booleans and bytes bounded by 1
    # are already in [0, 1].
    byte = np.dtype(space.dtype) == np.dtype(np.uint8) and float(np.max(space.high)) > 1
    scale = "byte" if byte else "unit"
    if len(shape) == 2:
        return shape[0], shape[1], 1, "hw", (0, 1), scale
    if len(shape) == 3:
        order = channels_order(shape)
        if order == "hwc":
            return shape[0], shape[1], shape[2], order, (0, 1, 2), scale
        if order == "chw":
            return shape[1], shape[2], shape[0], order, (1, 2, 0), scale
    if len(shape) == 4:
        stack, frame = shape[0], shape[1:]
        order = channels_order(frame)
        if order == "hwc":
            h, w, c = frame
            return h, w, stack * c, "stack-hwc", (1, 2, 0, 3), scale
        if order == "chw":
            c, h, w = frame
            return h, w, stack * c, "stack-chw", (2, 3, 0, 1), scale
    raise TypeError(
        f"observation space {space} looks like an image ({space.dtype}) but its channel "
        "axis cannot be told: Strata takes (height, width), (height, width, channels) or "
        "(channels, height, width) with the channels the smallest axis, and a frame stack "
        "of those; reorder it with a wrapper (gymnasium.wrappers.TransformObservation)")


def flattener(np, spaces, space):
    """Box, Discrete, MultiBinary, MultiDiscrete, and Dict or Tuple of them, flattened as
    gymnasium.spaces.flatten does (one-hot for discrete values, Dict in key order), except
    images (Boxes of bytes or booleans with 2 to 4 axes), which are written channels-last
    (height, width, channels) whatever order the env gives them in."""
    image = image_layout(np, space) if isinstance(space, spaces.Box) else None
    if image is not None:
        h, w, c, order, axes, scale = image

        def write(out, pixels, value):
            pixels[:] = np.asarray(value).transpose(axes).reshape(-1)

        text = f"Image{tuple(space.shape)}"
        found = {"offset": 0, "height": h, "width": w, "channels": c, "order": order,
                 "scale": scale, "shape": [int(n) for n in space.shape]}
        return Flat(0, text, write, [found], bdim=h * w * c)
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        n = int(np.prod(space.shape))
        kind = "Box" if isinstance(space, spaces.Box) else "MultiBinary"

        def write(out, pixels, value):
            out[:] = np.asarray(value).reshape(-1)

        return Flat(n, f"{kind}{tuple(space.shape)}", write)
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)

        def write(out, pixels, value):
            out[:] = 0.0
            out[int(value) - start] = 1.0

        return Flat(n, f"Discrete({n})", write)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = [int(v) for v in np.asarray(space.nvec).reshape(-1)]
        starts = [int(v) for v in np.asarray(space.start).reshape(-1)]
        offsets = np.cumsum([0] + nvec[:-1])

        def write(out, pixels, value):
            out[:] = 0.0
            flat = np.asarray(value).reshape(-1)
            for off, v, s in zip(offsets, flat, starts):
                out[off + int(v) - s] = 1.0

        return Flat(sum(nvec), f"MultiDiscrete({nvec})", write)
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        keyed = isinstance(space, spaces.Dict)
        items = list(space.spaces.items()) if keyed else list(enumerate(space.spaces))
        # Offsets in the whole row, in the float row and in the byte row.
        parts, offset, fo, bo, images = [], 0, 0, 0, []
        for key, sub in items:
            flat = flattener(np, spaces, sub)
            parts.append((key, fo, bo, flat))
            images += [dict(i, offset=i["offset"] + offset) for i in flat.images]
            offset, fo, bo = offset + flat.dim, fo + flat.fdim, bo + flat.bdim

        def write(out, pixels, value):
            for key, f, b, flat in parts:
                flat.write(out[f : f + flat.fdim], pixels[b : b + flat.bdim], value[key])

        inner = ", ".join(f"{k}={f.text}" if keyed else f.text for k, _, _, f in parts)
        return Flat(fo, f"{'Dict' if keyed else 'Tuple'}({inner})", write, images, bdim=bo)
    raise TypeError(f"observation space {space} cannot be flattened (Box, Discrete, "
                    "MultiBinary, MultiDiscrete, Dict or Tuple of them)")


def as_f32(np, layout):
    """`layout` with every float rounded to f32, as Strata stores bounds: an env's f32
    bound (0.4 is 0.4000000059604645 as a Python float) and the config's shortest f32
    text for it (0.4) are then the same."""
    if isinstance(layout, dict):
        return {k: as_f32(np, v) for k, v in layout.items()}
    if isinstance(layout, list):
        return [as_f32(np, v) for v in layout]
    if isinstance(layout, float):
        return float(np.float32(layout))
    return layout


def finite_bound(v):
    """An action bound Strata can store: infinite bounds become f32's largest value."""
    return max(min(float(v), 3.4028234e38), -3.4028234e38)


def action_layout(np, spaces, space):
    """The action space as Strata's config stores it, and the converter of one f32 row."""
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"Discrete": {"n": int(space.n)}}, lambda row: int(row[0]) + start
    if isinstance(space, spaces.Box):
        shape, dtype = space.shape, space.dtype
        low = [finite_bound(v) for v in np.asarray(space.low).reshape(-1)]
        high = [finite_bound(v) for v in np.asarray(space.high).reshape(-1)]
        return {"Box": {"low": low, "high": high}}, lambda row: row.reshape(shape).astype(dtype)
    raise TypeError(f"action space {space} is not supported (Box or Discrete)")


# --- making envs --------------------------------------------------------------------


class SetupError(Exception):
    """What this Python lacks to make the env, said for a person: sent as is, without a
    traceback (which would only repeat it)."""


def import_packages():
    """numpy and gymnasium, or a SetupError naming this interpreter, what it lacks (all of
    it at once) and the ways to fix it."""
    found, missing = {}, []
    for name in ("numpy", "gymnasium"):
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        version = ".".join(str(v) for v in sys.version_info[:3])
        raise SetupError(
            f"Python {sys.executable} ({version}) cannot run Gymnasium envs: it has no "
            f"{' and no '.join(missing)}.\n"
            "Either point Strata at a Python that has them (STRATA_PYTHON=/path/to/python, "
            "or `runtime.python` in the run's config), or install them into this one: "
            f"{sys.executable} -m pip install -r python/requirements-gym.txt (the "
            "repository's pinned versions; `pip install gymnasium numpy` for classic "
            "control alone)."
        )
    return found["numpy"], found["gymnasium"]


def resolve(gym, target):
    """`module:callable` is called; anything else goes to gym.make (which itself accepts
    `module:EnvId`, importing the module to register its envs). A module that cannot be
    found is a SetupError that says where Python looked; one that fails while importing
    raises its own error, with its traceback."""
    module_name, sep, attr = target.rpartition(":")
    if sep and module_name:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not (module_name + ".").startswith(e.name + "."):
                raise
            searched = "\n".join(f"  {p or '.'}" for p in sys.path)
            raise SetupError(
                f"cannot import module `{module_name}` (for `{target}`): no module named "
                f"`{e.name}` on this Python's path ({sys.executable}):\n{searched}\n"
                "Put the directory that holds it on `runtime.python_path` (a path or a "
                "list, relative to where strata runs), or install it into this Python."
            ) from None
        factory = getattr(module, attr, None)
        if callable(factory):
            return factory
    register_namespace(gym, target)
    return lambda **kwargs: gym.make(target, **kwargs)


def register_namespace(gym, target):
    """Registers the envs of `target`'s namespace (`MinAtar` of `MinAtar/Breakout-v1`)
    from the package that declares it: Gymnasium 1.x no longer loads the `gymnasium.envs`
    entry points packages such as MinAtar still register through."""
    namespace, sep, _ = target.partition("/")
    if not sep or ":" in namespace or any(
            spec.namespace == namespace for spec in gym.registry.values()):
        return
    from importlib.metadata import entry_points

    for point in entry_points(group="gymnasium.envs"):
        if point.name == namespace:
            point.load()()
            return
    # Packages that register on import instead (ale-py: `ALE/Breakout-v5`).
    module = {"ALE": "ale_py"}.get(namespace)
    if module is not None:
        try:
            gym.register_envs(importlib.import_module(module))
        except ModuleNotFoundError:
            raise SetupError(
                f"`{target}` needs the `{module.replace('_', '-')}` package, which this "
                f"Python ({sys.executable}) lacks: {sys.executable} -m pip install -r "
                "python/requirements-gym.txt (the repository's pinned versions)") from None


def describe(np, gym, env, target):
    flat = flattener(np, gym.spaces, env.observation_space)
    action, _ = action_layout(np, gym.spaces, env.action_space)
    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None)
    threshold = getattr(spec, "reward_threshold", None)
    layout = {
        "id": getattr(spec, "id", None) or target,
        "observation": flat.text,
        "obs_dim": flat.dim,
        "action": action,
        "max_episode_steps": int(limit) if limit is not None else None,
        "reward_threshold": float(threshold) if threshold is not None else None,
    }
    if flat.images:
        layout["images"] = flat.images
    return layout


# --- Strata's own envs -------------------------------------------------------------


def register_strata_envs(gym, np):
    """`strata/Null-v0`: an env that does nothing, for measuring what the processes and
    the protocol cost (kwargs: obs_dim, continuous)."""

    class NullEnv(gym.Env):
        def __init__(self, obs_dim=4, continuous=False):
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
            self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous
                                 else gym.spaces.Discrete(2))
            self._obs = np.zeros(obs_dim, np.float32)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return self._obs.copy(), {}

        def step(self, action):
            return self._obs.copy(), 0.0, False, False, {}

    if "strata/Null-v0" not in gym.registry:
        gym.register("strata/Null-v0", entry_point=NullEnv, max_episode_steps=1000)


# --- faults (env.fault) -------------------------------------------------------------


def inject(fault, np, obs_row):
    kind = fault["kind"]
    if kind == "panic":
        raise RuntimeError(f"injected fault: the env raised at step {fault['at_step']}")
    if kind == "nan":
        obs_row[:] = np.nan
    elif kind == "hang":
        time.sleep(float(fault.get("hang_seconds", 30.0)))
    elif kind == "crash":
        import ctypes

        ctypes.string_at(0)  # a real segmentation fault


# --- the serving loop ---------------------------------------------------------------


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def send_message(fd, message):
    data = json.dumps(message).encode()
    write_all(fd, struct.pack("<I", len(data)) + data)


def framed_text(text):
    """A traceback as Strata reads it: a u32 length, then UTF-8 (its end, if too long)."""
    data = text.encode()[-ERROR_TEXT_MAX:]
    return struct.pack("<I", len(data)) + data


def send_error(fd, text):
    """`E`, then the traceback."""
    write_all(fd, REPLY_FAILED + framed_text(text))


def write_error(area, text):
    """The traceback of a failed command, in the region's error area."""
    framed = framed_text(text)
    area[: len(framed)] = memoryview(framed)


class Header:
    """The region's command words: Strata posts a command by its code and a new sequence
    number; this process marks it done by the done number (after its results, which x86's
    store order makes visible first; elsewhere Strata never spins, and the wake-up byte's
    system calls order them)."""

    def __init__(self, buf):
        self.u32 = memoryview(buf)[:HEADER].cast("I")
        self.u64 = memoryview(buf)[:HEADER].cast("Q")

    def done(self):
        return self.u64[DONE_SEQ // 8]

    def code(self):
        return self.u32[CMD_CODE // 4]

    def next_command(self, done, fd):
        """The sequence number of the next command: spinning for up to the budget, then
        sleeping until a byte arrives. None when Strata's end of the socket is closed or
        it sent a quit byte outside the region."""
        u64, at = self.u64, CMD_SEQ // 8
        spin_ns = self.u32[SPIN_NS // 4]
        if spin_ns:
            deadline = time.perf_counter_ns() + spin_ns
            while u64[at] == done:
                if time.perf_counter_ns() > deadline:
                    break
        while u64[at] == done:
            # One blocking read takes the command's byte and any stale ones before it.
            data = os.read(fd, 4096)
            if not data or b"Q" in data:
                return None
        return u64[at]

    def finish(self, seq, failed):
        self.u64[FAILED // 8] = 1 if failed else 0
        self.u64[DONE_SEQ // 8] = seq

    @staticmethod
    def drain(fd):
        """Reads the wake-up bytes waiting, without blocking; None at end-of-file."""
        got = b""
        while select.select([fd], [], [], 0)[0]:
            data = os.read(fd, 4096)
            if not data:
                return None
            got += data
        return got


def reset_seeded(env, seed):
    """Resets `env` with Strata's 64-bit seed folded to 32 bits (its halves xor-ed): envs
    that seed NumPy's legacy RandomState (MinAtar's games do) take no more."""
    return env.reset(seed=(seed ^ (seed >> 32)) & 0xFFFFFFFF)


def serve(args, np, gym, make, kwargs):
    k = args.envs
    envs = [make(**kwargs) for _ in range(k)]
    expected = json.loads(args.layout)
    got = describe(np, gym, envs[0], args.target)
    for key in ("observation", "obs_dim", "action", "images"):
        if as_f32(np, got.get(key)) != as_f32(np, expected.get(key)):
            raise ValueError(f"the env's {key} is {got.get(key)!r}, the run expects "
                             f"{expected.get(key)!r} (its spaces changed since the config "
                             "recorded them)")
    act_dim = len(got["action"]["Box"]["low"]) if "Box" in got["action"] else 1
    flat = flattener(np, gym.spaces, envs[0].observation_space)
    _, to_action = action_layout(np, gym.spaces, envs[0].action_space)
    buf = mmap.mmap(args.shm_fd, 0)
    header = struct.unpack_from("<5I", buf, 0) + struct.unpack_from("<I", buf, OBS_BYTES)
    if header != (MAGIC, PROTOCOL, k, flat.fdim, act_dim, flat.bdim):
        raise ValueError(f"shared region header {header} does not match protocol "
                         f"{PROTOCOL} with {k} envs, obs {flat.fdim} floats and "
                         f"{flat.bdim} bytes, action {act_dim}")
    v = region_views(np, buf, k, {"obs": flat.fdim, "pix": flat.bdim, "act": act_dim})
    actions, obs, final_obs = v["actions"], v["obs"], v["final_obs"]
    pixels, final_pixels = v["obs_pixels"], v["final_pixels"]
    rewards, clock, seeds = v["rewards"], v["clock"], v["seeds"]
    terminated, truncated, success = v["terminated"], v["truncated"], v["success"]
    game_return, game_length, game_over = v["game_return"], v["game_length"], v["game_over"]
    games = reports_games(json.loads(args.wrappers))
    fault = json.loads(args.fault) if args.fault else None
    record = open(args.record_file, "ab") if args.record_file else None
    steps = 0

    def record_frame(start):
        """Env 0's picture, appended to the recording: a start-of-episode flag, height,
        width and channels, then the bytes."""
        frame = np.ascontiguousarray(envs[0].render(), dtype=np.uint8)
        if frame.ndim == 2:
            frame = frame[:, :, None]
        record.write(struct.pack("<BIII", int(start), *frame.shape) + frame.tobytes())
        record.flush()

    def step_all():
        nonlocal steps
        steps += 1
        for i in range(k):
            env = envs[i]
            o, r, te, tr, info = env.step(to_action(actions[i]))
            clock[i] += 1
            rewards[i] = r
            terminated[i] = te
            truncated[i] = tr
            if te or tr:
                flat.write(final_obs[i], final_pixels[i], o)
                s = info.get("is_success") if isinstance(info, dict) else None
                success[i] = 0 if s is None else (2 if s else 1)
                game = info.get("strata_game") if games else None
                if game is not None:
                    game_return[i], game_length[i] = game
                game_over[i] = 0 if not games else (1 if game is None else 2)
                o, _ = env.reset()
            flat.write(obs[i], pixels[i], o)
            if record is not None and i == 0:
                record_frame(te or tr)
        if fault is not None and steps == fault["at_step"]:
            inject(fault, np, obs[0])

    def reset_all():
        for i in range(k):
            o, _ = reset_seeded(envs[i], int(seeds[i]))
            flat.write(obs[i], pixels[i], o)
            terminated[i] = truncated[i] = success[i] = game_over[i] = 0
        if record is not None:
            record_frame(True)

    commands = {ord(COMMAND_STEP): step_all, ord(COMMAND_RESET): reset_all}
    words = Header(buf)
    # Everything made so far (the packages imported, MinAtar's with matplotlib and SciPy,
    # and the envs) lives as long as the process: left out of the collector's passes, the
    # full collections the steps' garbage triggers stay short.
    gc.collect()
    gc.freeze()
    os.write(args.reply_fd, REPLY_DONE)
    done = words.done()
    while True:
        seq = words.next_command(done, args.cmd_fd)
        if seq is None:
            break
        code = words.code()
        if code == ord(COMMAND_QUIT):
            break
        try:
            commands[code]()
            failed = False
        except Exception:
            write_error(v["error"], traceback.format_exc())
            failed = True
        words.finish(seq, failed)
        done = seq
        os.write(args.reply_fd, REPLY_FAILED if failed else REPLY_DONE)
        if seq % DRAIN_EVERY == 0:
            data = words.drain(args.cmd_fd)
            if data is None or b"Q" in data:
                break
    for env in envs:
        env.close()
    if record is not None:
        record.close()


def main():
    parser = argparse.ArgumentParser(prog="strata_gym_worker")
    parser.add_argument("--target", required=True)
    parser.add_argument("--kwargs", default="{}")
    parser.add_argument("--wrappers", default="[]")
    parser.add_argument("--record-file", default="")
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--describe", action="store_true")
    parser.add_argument("--cmd-fd", type=int)
    parser.add_argument("--shm-fd", type=int)
    parser.add_argument("--envs", type=int, default=1)
    parser.add_argument("--layout", default="{}")
    parser.add_argument("--fault", default="")
    args = parser.parse_args()
    # Ctrl-C belongs to the trainer, which stops this process in order; prints go to
    # stderr, so nothing an env prints can be taken for the protocol.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(2, 1)
    for p in reversed(args.path):
        sys.path.insert(0, p)
    try:
        np, gym = import_packages()
        register_strata_envs(gym, np)
        made = resolve(gym, args.target)
        names = json.loads(args.wrappers)

        def make(**kwargs):
            return apply_wrappers(gym, np, made(**kwargs), names)

        kwargs = json.loads(args.kwargs)
        if args.describe:
            env = make(**kwargs)
            send_message(args.reply_fd, {"layout": describe(np, gym, env, args.target)})
            env.close()
            return 0
        serve(args, np, gym, make, kwargs)
        return 0
    except Exception as e:
        setup = isinstance(e, SetupError)
        text = str(e) if setup else traceback.format_exc()
        try:
            if args.describe:
                send_message(args.reply_fd, {"setup" if setup else "error": text})
            else:
                send_error(args.reply_fd, text)
        except OSError:
            sys.stderr.write(text)
        return 1


if __name__ == "__main__":
    sys.exit(main())
