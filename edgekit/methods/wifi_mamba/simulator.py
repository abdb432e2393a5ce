"""A physically motivated CSI simulator in the Person-in-WiFi 3D format.

No public CSI can ship with edgekit, so this renders complex CSI ``(3, 3, 30, 20)`` per frame from
3D skeletons [ours, following the standard ray model of WiFi sensing, e.g. Wang et al.,
"Understanding and Modeling of WiFi Signal Based Human Activity Recognition", MobiCom 2015]:

    H[r, a, k, p] = g_rp · e^{j(φ_rp + 2π k Δf τ_rp)}
                    · Σ_m  T_m(p) · γ_m(p) · e^{-j 2π f_k L_m(p) / c}  + n

over paths m: the line of sight (γ = 1/L, L = |tx - rx_a|), a few static wall reflections (image
sources, fixed per room) and the body's paths: one per keypoint (γ = reflectivity of that body
part, bistatic length L = |tx - q| + |q - rx_a|, spreading 1/(|tx - q|·|q - rx_a|)), or with
the physical body model every bone a cylinder cut into elements, the torso an elliptic cylinder,
the head a sphere, each returning from its specular point with a physical-optics gain that
depends on its orientation to the transmitter and receiver (``body.py``); there a body shadows
the rays that cross it (T < 1), other people's and the static ones, and the torso hides a
person's own far limbs. ``f_k`` are the 30 Intel 5300 subcarriers of the 5.64 GHz
channel; the hardware adds per-packet random phase offsets (carrier frequency offset φ and
sampling time offset τ, the linear slope that phase sanitisation removes), automatic gain
control g and thermal noise n.

People walk (speed, heading, gait cycle with arm and leg swing, occasional arm raises) inside the
sensing area and bounce off its borders (or, with ``Station``, one person raises arms and lifts a
knee on a mark); packets within a frame sample the motion (1 ms apart by
default; ``PHYSICAL`` spreads them 5 ms apart over the whole frame), so Doppler and micro-motion
appear across the 20 packets; frames of one sequence are consecutive and labelled at their
middle packet.

The body model is a choice (``BodyModel``): by default one point scatterer per keypoint, as the
simulator has always rendered (the built-in dataset; ``POINTS`` names it); ``PHYSICAL`` renders
bones as cylinders with orientation-dependent returns, the torso as an elliptic cylinder, and
body shadowing, about 5x slower. What the CSI carries (``observability.py``,
``benchmarks/wifi_observability.py``): with people walking, in both body models, position, body
yaw (walkers face where they walk; with phase sanitised per receiver the CSI ratio between
antennas keeps the sign of their Doppler shift) and the size of the stride (the Doppler spread
of the legs), but for a probe not which leg is forward (a walker and its left-right mirror image
move alike) nor the height of a raised wrist. Limb pose is in the CSI, as the interference of a
limb's paths with the rest of the body's, but that changes completely over a few centimetres of
place or a few per cent of body size, which 2,400 frames of walkers of every size cannot cover;
in the in-place protocol (``Station``: one person on a mark) a ridge probe finds the wrist's
height at R² 0.68. Pose figures on walkers therefore measure localisation, heading and gait, on
the station limb pose.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgekit.methods.wifi_mamba import body as bodies
from edgekit.methods.wifi_mamba.csi import (
    CENTER_FREQ_HZ,
    CSI_SHAPE,
    N_ANT,
    N_KPT,
    N_PKT,
    N_RX,
    SUBCARRIER_FREQ_HZ,
    SUBCARRIER_INDEX,
    SUBCARRIER_SPACING_HZ,
)

C = 299_792_458.0
WAVELENGTH = C / 5.64e9
MAX_PERSONS = 3

# Standing skeleton in body coordinates (lateral u, forward f, up z), metres, for 1.75 m height.
_TEMPLATE = np.array([
    [0.00, 0.0, 1.65], [0.00, 0.0, 1.45],                                          # head, neck
    [-0.19, 0.0, 1.42], [-0.22, 0.0, 1.13], [-0.24, 0.0, 0.86],                   # right arm
    [0.19, 0.0, 1.42], [0.22, 0.0, 1.13], [0.24, 0.0, 0.86],                      # left arm
    [-0.10, 0.0, 0.95], [-0.10, 0.0, 0.52], [-0.10, 0.0, 0.08],                   # right leg
    [0.10, 0.0, 0.95], [0.10, 0.0, 0.52], [0.10, 0.0, 0.08],                      # left leg
])
# Relative reflectivity per keypoint: the torso (neck, shoulders, hips) reflects most.
_REFLECTIVITY = np.array([0.6, 1.0, 0.8, 0.4, 0.3, 0.8, 0.4, 0.3, 0.9, 0.5, 0.3, 0.9, 0.5, 0.3])
_ARM = {"r": (3, 4), "l": (6, 7)}
_LEG = {"r": (9, 10), "l": (12, 13)}


@dataclass(frozen=True)
class Geometry:
    """One transmitter, three receivers with three-antenna λ/2 arrays, static reflectors."""

    tx: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    rx_centres: np.ndarray = field(default_factory=lambda: np.array(
        [[-2.2, 3.0, 1.0], [2.2, 3.0, 1.0], [0.0, 6.0, 1.0]]))
    area_x: tuple[float, float] = (-1.4, 1.4)  # where people walk
    area_y: tuple[float, float] = (1.5, 4.5)
    n_reflectors: int = 4
    seed: int = 1234  # fixes the room (reflectors)

    def antennas(self) -> np.ndarray:
        """(3, 3, 3): receiver, antenna, xyz; arrays vertical so each sees the room alike."""
        offsets = (np.arange(N_ANT) - (N_ANT - 1) / 2) * WAVELENGTH / 2
        ants = np.repeat(self.rx_centres[:, None, :], N_ANT, axis=1).copy()
        ants[..., 2] += offsets[None, :]
        return ants

    def reflectors(self) -> tuple[np.ndarray, np.ndarray]:
        """Static scatterers (wall and furniture points) and their complex reflection gains."""
        rng = np.random.default_rng(self.seed)
        pts = np.stack([rng.uniform(-3.5, 3.5, self.n_reflectors),
                        rng.uniform(-0.5, 7.5, self.n_reflectors),
                        rng.uniform(0.2, 2.5, self.n_reflectors)], axis=1)
        gains = rng.uniform(0.3, 0.8, self.n_reflectors) * np.exp(
            1j * rng.uniform(0, 2 * np.pi, self.n_reflectors))
        return pts, gains


@dataclass(frozen=True)
class Impairments:
    snr_db: float = 25.0
    sto_ns: float = 40.0  # sampling time offset drawn in +-sto_ns per packet and receiver
    agc_std: float = 0.05  # log-normal gain jitter
    body_gain: float = 0.5  # scales every keypoint's reflectivity (point-scatterer body only)
    packet_interval_s: float = 1e-3  # PHYSICAL spreads the 20 packets over the 0.1 s frame
    frame_interval_s: float = 0.1


@dataclass(frozen=True)
class BodyModel:
    """How a body interacts with the radio: one point scatterer per keypoint (the default) or
    extended scatterers (bones as cylinders with orientation-dependent returns, ``body.py``);
    shadowing or not."""

    extended: bool = False
    shadowing: bool = False


# The physical body model, opt-in: a linear probe finds yaw better in it (40° vs 51°), but it
# does not make articulation visible either, and renders about 5x slower (benchmarks/README.md,
# wifi_observability.py). POINTS is the default, the built-in dataset.
PHYSICAL = (BodyModel(extended=True, shadowing=True), Impairments(packet_interval_s=5e-3))
POINTS = (BodyModel(), Impairments())


@dataclass(frozen=True)
class Station:
    """The in-place protocol: one person on a mark at the sensing area's centre, facing the far
    receiver (within ``yaw_jitter_deg``), raising arms and lifting a knee while the body sways
    by an amplitude drawn from ``sway_m`` (metres, per axis; quiet standing sways about 1 cm).
    Each sequence's person is one of ``scales`` (body sizes, 1.0 = 1.75 m): by default one
    person, the same in training and test, a per-user model.

    Why it exists: a limb's pose is in the CSI as the interference of its paths with the rest of
    the body's, whose phases turn once per 5.3 cm of path, so what a pose looks like in the CSI
    changes completely when the person moves by a few centimetres or is a few per cent taller
    (``benchmarks/wifi_observability.py`` measures both). Walkers of every size cross the whole
    area, so no practical number of frames covers each spot and size with every pose; one person
    on a mark is covered, as in the in-place protocols of WiFi-sensing datasets."""

    sway_m: tuple[float, float] = (0.01, 0.03)
    yaw_jitter_deg: float = 5.0
    scales: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        lo, hi = self.sway_m
        if not (0 <= lo <= hi <= 0.5 and 0 <= self.yaw_jitter_deg <= 180 and self.scales
                and all(0.5 <= s <= 1.5 for s in self.scales)):
            raise ValueError(f"a station needs 0 <= sway_m[0] <= sway_m[1] <= 0.5 m, a yaw jitter "
                             f"in [0, 180] degrees and body scales in [0.5, 1.5]; got {self}")


@dataclass(frozen=True)
class PoseData:
    """Frames of simulated (or loaded) CSI with their labels."""

    csi: np.ndarray  # (F, 3, 3, 30, 20) complex64
    keypoints: np.ndarray  # (F, 3, 14, 3) float32 metres; rows >= n_persons are zero
    n_persons: np.ndarray  # (F,) int64
    sequence: np.ndarray  # (F,) int64: which sequence a frame belongs to (frames are in order)

    def __len__(self) -> int:
        return len(self.csi)


class _Walker:
    """One person's motion: position, heading, gait cycle and an occasional arm raise."""

    def __init__(self, rng: np.random.Generator, pos: np.ndarray, geo: Geometry) -> None:
        self.pos = pos
        speed = rng.uniform(0.0, 0.9)
        heading = rng.uniform(0, 2 * np.pi)
        self.vel = speed * np.array([np.cos(heading), np.sin(heading)])
        self.yaw = heading if speed > 0.1 else rng.uniform(0, 2 * np.pi)
        self.scale = rng.uniform(0.88, 1.1)
        self.gait_hz = 0.9 + 0.9 * speed
        self.gait_phase = rng.uniform(0, 2 * np.pi)
        self.swing = min(1.0, speed / 0.6)
        self.raise_amp = rng.uniform(0, 1) if rng.random() < 0.4 else 0.0
        self.raise_hz = rng.uniform(0.2, 0.6)
        self.raise_side = rng.integers(2)
        self.geo = geo

    def step(self, dt: float) -> None:
        self.gait_phase += 2 * np.pi * self.gait_hz * dt
        self.pos = self.pos + self.vel * dt
        for i, (lo, hi) in enumerate((self.geo.area_x, self.geo.area_y)):
            if not lo <= self.pos[i] <= hi:
                self.vel[i] = -self.vel[i]
                self.pos[i] = np.clip(self.pos[i], lo, hi)
                if np.linalg.norm(self.vel) > 0.1:
                    self.yaw = float(np.arctan2(self.vel[1], self.vel[0]))

    def poses(self, t: np.ndarray) -> np.ndarray:
        """(len(t), 14, 3) world keypoints at times ``t`` (s) after the current step."""
        local = np.repeat(_TEMPLATE[None] * self.scale, len(t), axis=0)  # (T, 14, 3)
        phase = 2 * np.pi * self.gait_hz * t + self.gait_phase
        s = np.sin(phase)[:, None] * self.swing
        for side, sign in (("r", 1.0), ("l", -1.0)):
            (elbow, wrist), (knee, ankle) = _ARM[side], _LEG[side]
            local[:, elbow, 1] += sign * 0.12 * s[:, 0]
            local[:, wrist, 1] += sign * 0.25 * s[:, 0]
            local[:, knee, 1] -= sign * 0.15 * s[:, 0]
            local[:, ankle, 1] -= sign * 0.30 * s[:, 0]
        if self.raise_amp:
            _raise_arm(local, "r" if self.raise_side == 0 else "l",
                       _lift(self.raise_amp, self.raise_hz, self.gait_phase, t))
        centre = self.pos[None, :] + self.vel[None, :] * t[:, None]  # (T, 2)
        return _to_world(local, self.yaw, centre)


class _Stander:
    """One person acting on a marked spot (``Station``): each arm raised or not, a knee lifted
    or not, each at its own pace, while the body sways a little about the mark."""

    def __init__(self, rng: np.random.Generator, mark: np.ndarray, station: Station) -> None:
        self.mark, self.clock = mark, 0.0
        self.yaw = np.pi / 2 + np.radians(rng.uniform(-1, 1) * station.yaw_jitter_deg)
        self.scale = station.scales[rng.integers(len(station.scales))]
        self.sway = rng.uniform(*station.sway_m, 2)
        self.sway_hz, self.sway_phase = rng.uniform(0.1, 0.3, 2), rng.uniform(0, 2 * np.pi, 2)
        # (amplitude, pace, phase) per arm; amplitude 0 for an arm that stays down
        self.arms = {side: (rng.uniform(0, 1) * (rng.random() < 0.7), rng.uniform(0.2, 0.6),
                            rng.uniform(0, 2 * np.pi)) for side in ("r", "l")}
        self.knee = ("r" if rng.integers(2) == 0 else "l", rng.uniform(0, 1)
                     * (rng.random() < 0.4), rng.uniform(0.3, 0.8), rng.uniform(0, 2 * np.pi))

    def step(self, dt: float) -> None:
        self.clock += dt

    def poses(self, t: np.ndarray) -> np.ndarray:
        """(len(t), 14, 3) world keypoints at times ``t`` (s) after the current step."""
        t = t + self.clock
        local = np.repeat(_TEMPLATE[None] * self.scale, len(t), axis=0)  # (T, 14, 3)
        for side, (amp, hz, phase) in self.arms.items():
            if amp:
                _raise_arm(local, side, _lift(amp, hz, phase, t))
        side, amp, hz, phase = self.knee
        if amp:  # up to the thigh level: knee forward and up, the shin hanging below it
            lift = _lift(amp, hz, phase, t)
            knee, ankle = _LEG[side]
            local[:, knee, 1:] += 0.4 * lift[:, None]
            local[:, ankle, 1] += 0.35 * lift
            local[:, ankle, 2] += 0.4 * lift
        angle = 2 * np.pi * self.sway_hz[None] * t[:, None] + self.sway_phase[None]
        return _to_world(local, self.yaw, self.mark[None] + self.sway[None] * np.sin(angle))


def _lift(amp: float, hz: float, phase: float, t: np.ndarray) -> np.ndarray:
    """A raise from 0 to ``amp`` and back at ``hz``: (T,)."""
    return amp * 0.5 * (1 - np.cos(2 * np.pi * hz * t + phase))


def _raise_arm(local: np.ndarray, side: str, lift: np.ndarray) -> None:
    """Raise one arm of body-frame skeletons (T, 14, 3) in place by ``lift`` (T,) in [0, 1]."""
    elbow, wrist = _ARM[side]
    local[:, elbow, 2] += 0.25 * lift
    local[:, wrist, 2] += 0.65 * lift
    local[:, wrist, 1] += 0.2 * lift


def _to_world(local: np.ndarray, yaw: float, centre: np.ndarray) -> np.ndarray:
    """Body-frame skeletons (T, 14, 3) facing ``yaw`` with their origin at ``centre`` (T, 2)."""
    c, sn = np.cos(yaw), np.sin(yaw)
    # body forward axis f -> heading (c, sn); lateral u -> (sn, -c)
    x = local[..., 0] * sn + local[..., 1] * c
    y = -local[..., 0] * c + local[..., 1] * sn
    return np.stack([x + centre[:, :1], y + centre[:, 1:], local[..., 2]], axis=-1)


def render_csi(keypoints: np.ndarray, geo: Geometry, imp: Impairments,
               rng: np.random.Generator, body: BodyModel = BodyModel()) -> np.ndarray:
    """CSI ``(3, 3, 30, P)`` for keypoints ``(P, M, 3)`` (all persons' keypoints per packet,
    ``M`` a multiple of 14)."""
    ants = geo.antennas().reshape(N_RX * N_ANT, 3)  # (9, 3)
    refl_pts, refl_gain = geo.reflectors()
    n_pkt, m = keypoints.shape[:2]
    persons = keypoints.reshape(n_pkt, m // N_KPT, N_KPT, 3)
    k = 2 * np.pi * SUBCARRIER_FREQ_HZ / C  # (30,) wavenumbers
    # line of sight and static reflections: (9, R+1) lengths and gains
    los = np.linalg.norm(ants - geo.tx, axis=-1)[:, None]
    d1 = np.linalg.norm(refl_pts - geo.tx, axis=-1)  # (R,)
    d2 = np.linalg.norm(ants[:, None] - refl_pts[None], axis=-1)  # (9, R)
    static_len = np.concatenate([los, d1[None] + d2], axis=1)
    static_amp = np.concatenate([1.0 / los, refl_gain[None] / (d1[None] * d2)], axis=1)
    static_amp = np.broadcast_to(static_amp, (n_pkt, *static_amp.shape))
    if body.shadowing:
        static_amp = static_amp * _static_transmission(persons, geo.tx, ants, refl_pts)
    h_static = np.einsum("par,ark->pak", static_amp, np.exp(-1j * static_len[..., None] * k))
    if body.extended:
        amp, length = _extended_paths(persons, geo.tx, ants, body.shadowing)
    else:  # one point scatterer per keypoint: (P, M) and (P, 9, M)
        b1 = np.linalg.norm(keypoints - geo.tx, axis=-1)
        b2 = np.linalg.norm(ants[None, :, None] - keypoints[:, None], axis=-1)
        gamma = imp.body_gain * np.tile(_REFLECTIVITY, m // N_KPT)
        amp = gamma[None, None] / (b1[:, None] * b2)
        length = b1[:, None] + b2
    h_body = np.einsum("pam,pamk->pak", amp.astype(np.float32), _phasor(length))  # (P, 9, 30)
    h = h_static + h_body
    # hardware: per packet and receiver phase offset, time offset (linear slope) and gain
    phi = rng.uniform(0, 2 * np.pi, (n_pkt, N_RX))
    tau = rng.uniform(-imp.sto_ns, imp.sto_ns, (n_pkt, N_RX)) * 1e-9
    gain = np.exp(rng.normal(0, imp.agc_std, (n_pkt, N_RX)))
    rot = gain[..., None] * np.exp(1j * (phi[..., None] + 2 * np.pi * SUBCARRIER_SPACING_HZ
                                         * SUBCARRIER_INDEX * tau[..., None]))  # (P, 3, 30)
    h = h.reshape(n_pkt, N_RX, N_ANT, -1) * rot[:, :, None]
    noise_std = np.sqrt(np.mean(np.abs(h) ** 2) / 10 ** (imp.snr_db / 10) / 2)
    h = h + noise_std * (rng.standard_normal(h.shape) + 1j * rng.standard_normal(h.shape))
    return np.moveaxis(h, 0, -1)  # (3, 3, 30, P)


def _phasor(length: np.ndarray) -> np.ndarray:
    """``exp(-j k L)`` over the 30 subcarriers ``(..., 30)`` complex64, the bulk of the rendering
    time: each half of the band is 15 subcarriers 4 apart, so three exponentials and a running
    product give all 30 (exact to float64 rounding)."""
    kk = 2 * np.pi * SUBCARRIER_FREQ_HZ / C
    step = kk[1] - kk[0]
    ratio = np.exp(-1j * step * length)[..., None]
    powers = np.cumprod(np.broadcast_to(ratio, (*length.shape, 14)), axis=-1)
    halves = []
    for first in (kk[0], kk[15]):
        base = np.exp(-1j * first * length)[..., None]
        halves += [base, base * powers]
    return np.concatenate(halves, axis=-1).astype(np.complex64)


def _expand(blk: dict[str, np.ndarray], axes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {name: np.expand_dims(v, axes) for name, v in blk.items()}


def _static_transmission(persons: np.ndarray, tx: np.ndarray, ants: np.ndarray,
                         refl_pts: np.ndarray) -> np.ndarray:
    """``(P, 9, R+1)`` amplitude factors of the line of sight and the wall paths through the
    people ``(P, M, 14, 3)``."""
    blk = bodies.blockers(persons)  # fields (P, M[, 3])
    los = bodies.transmission(tx, ants[None, :, None], _expand(blk, (1,))).prod(-1)  # (P, 9)
    leg1 = bodies.transmission(tx, refl_pts[None, :, None], _expand(blk, (1,))).prod(-1)
    leg2 = bodies.transmission(refl_pts[None, None, :, None], ants[None, :, None, None],
                               _expand(blk, (1, 2))).prod(-1)  # (P, 9, R)
    return np.concatenate([los[..., None], leg1[:, None] * leg2], axis=-1)


def _extended_paths(persons: np.ndarray, tx: np.ndarray, ants: np.ndarray,
                    shadowing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Amplitudes and path lengths ``(P, 9, M·E)`` of every body element of ``(P, M, 14, 3)``."""
    n_pkt, n_persons = persons.shape[:2]
    el = bodies.elements(persons)  # fields (P, M, E[, 3])
    flat = {name: v.reshape(n_pkt, -1, *v.shape[3:]) for name, v in el.items()}  # (P, N[, 3])
    amp, length, point = bodies.scatter(flat, tx, ants, 2 * np.pi * CENTER_FREQ_HZ / C)
    if not shadowing:
        return amp, length
    owner = np.repeat(np.arange(n_persons), bodies.N_ELEMENTS)  # (N,)
    blk = _expand(bodies.blockers(persons), (1, 2))  # (P, 1, 1, M[, 3])
    start, end = point[..., None, :], ants[None, :, None, None]  # rays from specular points
    through = (bodies.transmission(tx, start, blk) * bodies.transmission(start, end, blk))
    through = np.where(owner[:, None] == np.arange(n_persons), 1.0, through).prod(-1)
    own = {name: np.expand_dims(v[:, owner], 1)  # each element's own torso: (P, 1, N[, 3])
           for name, v in bodies.torso_blockers(persons).items()}
    hidden = bodies.transmission(tx, point, own) * bodies.transmission(point, ants[None, :, None],
                                                                       own)
    through = through * np.where(flat["limb"][:, None], hidden, 1.0)
    return amp * through, length


def _place(rng: np.random.Generator, n: int, geo: Geometry,
           min_sep: float = 0.7) -> list[np.ndarray]:
    spots: list[np.ndarray] = []
    while len(spots) < n:
        p = np.array([rng.uniform(*geo.area_x), rng.uniform(*geo.area_y)])
        if all(np.linalg.norm(p - q) >= min_sep for q in spots):
            spots.append(p)
    return spots


def simulate_sequence(n_frames: int, n_persons: int, rng: np.random.Generator,
                      geo: Geometry = Geometry(), imp: Impairments = Impairments(),
                      n_packets: int = N_PKT, body: BodyModel = BodyModel(),
                      station: Station | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive frames of 1..3 walking people (or, with ``station``, one person acting on a
    mark): CSI ``(F, 3, 3, 30, n_packets)`` complex64 and keypoints ``(F, 3, 14, 3)`` float32
    (zero rows beyond ``n_persons``), labelled at each frame's middle packet."""
    if not 1 <= n_persons <= MAX_PERSONS:
        raise ValueError(f"n_persons must be 1..{MAX_PERSONS}, got {n_persons}")
    if station is None:
        walkers = [_Walker(rng, p, geo) for p in _place(rng, n_persons, geo)]
    elif n_persons == 1:
        walkers = [_Stander(rng, np.array([np.mean(geo.area_x), np.mean(geo.area_y)]), station)]
    else:
        raise ValueError(f"the station protocol has one person, got {n_persons}")
    t = np.arange(n_packets) * imp.packet_interval_s
    csi = np.empty((n_frames, N_RX, N_ANT, CSI_SHAPE[2], n_packets), np.complex64)
    kpts = np.zeros((n_frames, MAX_PERSONS, N_KPT, 3), np.float32)
    for f in range(n_frames):
        poses = [w.poses(t) for w in walkers]  # each (P, 14, 3)
        kpts[f, :n_persons] = np.stack([p[n_packets // 2] for p in poses])
        csi[f] = render_csi(np.concatenate(poses, axis=1), geo, imp, rng, body)
        for w in walkers:
            w.step(imp.frame_interval_s)
    return csi, kpts


def simulate_dataset(n_sequences: int, frames_per_sequence: int, seed: int = 0,
                     persons: tuple[int, ...] | None = None, geo: Geometry = Geometry(),
                     imp: Impairments = Impairments(), body: BodyModel = BodyModel(),
                     station: Station | None = None) -> PoseData:
    """``n_sequences`` sequences, person counts cycling through ``persons`` (default 1, 2, 3;
    with ``station`` one person on a mark, and more is refused)."""
    if persons is None:
        persons = (1, 2, 3) if station is None else (1,)
    rng = np.random.default_rng(seed)
    csis, kpts, counts, seqs = [], [], [], []
    for s in range(n_sequences):
        n = persons[s % len(persons)]
        c, k = simulate_sequence(frames_per_sequence, n, rng, geo, imp, body=body,
                                 station=station)
        csis.append(c)
        kpts.append(k)
        counts.append(np.full(frames_per_sequence, n, np.int64))
        seqs.append(np.full(frames_per_sequence, s, np.int64))
    return PoseData(np.concatenate(csis), np.concatenate(kpts), np.concatenate(counts),
                    np.concatenate(seqs))
