"""Flange positions of the Franka Panda for a few joint configurations, from the published
modified-DH parameters with NumPy (the product of Rx(alpha) Tx(a) Rz(theta) Tz(d) matrices).
Writes crates/env/src/tasks/panda_fk_fixtures.in, which the kinematics test includes."""
import numpy as np

MDH = [(0.0, 0.333, 0.0), (0.0, 0.0, -np.pi / 2), (0.0, 0.316, np.pi / 2), (0.0825, 0.0, np.pi / 2),
       (-0.0825, 0.384, -np.pi / 2), (0.0, 0.0, np.pi / 2), (0.088, 0.0, np.pi / 2), (0.0, 0.107, 0.0)]


def rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])


def trans(x, y, z):
    t = np.eye(4)
    t[:3, 3] = [x, y, z]
    return t


def flange(q):
    t = np.eye(4)
    for i, (a, d, alpha) in enumerate(MDH):
        theta = q[i] if i < 7 else 0.0
        t = t @ rx(alpha) @ trans(a, 0, 0) @ rz(theta) @ trans(0, 0, d)
    return t[:3, 3]


poses = [
    [0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4],  # Franka's ready pose
    [0.5, 0.3, -0.4, -1.8, 0.7, 2.0, -1.0],
    [-2.0, 1.2, 1.5, -0.5, -2.5, 0.1, 2.5],
    [2.8, -1.7, 2.8, -3.0, 2.8, 3.7, 2.8],
]
rows = []
for q in poses:
    p = flange(q)
    rows.append("([" + ", ".join(repr(float(v)) for v in q) + "], [" + ", ".join(repr(float(v)) for v in p) + "])")
with open("crates/env/src/tasks/panda_fk_fixtures.in", "w") as f:
    f.write("[\n    " + ",\n    ".join(rows) + ",\n]\n")
print("\n".join(rows))
