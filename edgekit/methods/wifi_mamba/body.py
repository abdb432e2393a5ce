"""The human body as a radio scatterer and blocker, for the CSI simulator.

Physical optics [ours, after the ray models of WiFi-sensing simulators: Wang et al., MobiCom
2015; Korany et al., "Xmodal-ID", MobiCom 2019, which render a body as reflecting cylinders;
and the RCS of a cylinder, Knott et al., "Radar Cross Section", 2nd ed., ch. 6]:

- every bone is a cylinder cut into ``SUBSEGMENTS`` elements; an element of length L whose
  surface has radius of curvature R, seen from the transmitter and a receiver along unit
  vectors u1 and u2, returns the field

      Γ · L · sqrt(k R cos(β/2) / 4π) · sinc(k L (axis·(u1+u2)) / 2) / (d1 d2)

  (bistatic angle β; the sinc is the coherent integral along the element, so a limb reflects
  most when its axis is perpendicular to the bisector), from its specular point, the surface
  point whose normal is the bisector;
- the torso is an elliptic cylinder (wide across the shoulders, shallow front to back), so its
  return and specular point depend on the body's yaw: R = a²b² / (a² h_u² + b² h_f²)^{3/2} for
  the bisector's components (h_u, h_f) on the lateral and forward axes; the head is a sphere;
- Γ is skin's reflection coefficient at 5.6 GHz (relative permittivity about 38; Gabriel et al.,
  Phys. Med. Biol. 1996);
- a body shadows a ray that passes through it (an elliptic cylinder from the floor to above the
  head), attenuating it by ``BODY_LOSS_DB`` with a soft edge that stands in for diffraction; a
  limb is also shadowed by its own torso (the far arm is hidden).
"""
from __future__ import annotations

import numpy as np

SUBSEGMENTS = 3
SKIN_PERMITTIVITY = 38.0
GAMMA = (np.sqrt(SKIN_PERMITTIVITY) - 1) / (np.sqrt(SKIN_PERMITTIVITY) + 1)  # about 0.72
BODY_LOSS_DB = 12.0
SHADOW_EDGE = 0.15  # width of the soft edge, in units of the blocker's semi-axes
HEAD_RADIUS = 0.10
# bones: (from keypoint, to keypoint, radius in metres) for a 1.75 m person
BONES = ((1, 0, 0.05),                                  # neck
         (2, 3, 0.045), (3, 4, 0.035), (5, 6, 0.045), (6, 7, 0.035),  # arms
         (8, 9, 0.07), (9, 10, 0.05), (11, 12, 0.07), (12, 13, 0.05))  # legs
_R_SH, _L_SH, _R_HIP, _L_HIP, _HEAD = 2, 5, 8, 11, 0
TORSO_DEPTH = 0.62  # torso semi-depth / semi-width
BLOCKER_WIDTH = 1.25  # whole-body blocker semi-width / torso semi-width (the arms)
N_ELEMENTS = SUBSEGMENTS * (len(BONES) + 1) + 1  # bones, torso, head


def body_frame(kpts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit lateral (right-to-left) and forward horizontal vectors ``(..., 3)`` of skeletons
    ``(..., 14, 3)``: forward is lateral turned by +90° about the vertical."""
    lat = (kpts[..., _L_SH, :] + kpts[..., _L_HIP, :] - kpts[..., _R_SH, :] - kpts[..., _R_HIP, :])
    lat = lat * np.array([1.0, 1.0, 0.0])
    lat = lat / np.maximum(np.linalg.norm(lat, axis=-1, keepdims=True), 1e-9)
    fwd = np.stack([-lat[..., 1], lat[..., 0], np.zeros_like(lat[..., 0])], axis=-1)
    return lat, fwd


def elements(kpts: np.ndarray) -> dict[str, np.ndarray]:
    """Scattering elements of skeletons ``(..., 14, 3)``: each of ``(..., E, ·)``.

    ``centre`` (3), ``axis`` (3, unit), ``length``, semi-axes ``a`` (lateral) and ``b`` (forward)
    of the cross-section, ``lat``/``fwd`` the body frame, ``limb`` (shadowed by its own torso)."""
    lat, fwd = body_frame(kpts)
    shoulders = 0.5 * (kpts[..., _R_SH, :] + kpts[..., _L_SH, :])
    hips = 0.5 * (kpts[..., _R_HIP, :] + kpts[..., _L_HIP, :])
    half_width = 0.45 * np.linalg.norm(kpts[..., _L_SH, :] - kpts[..., _R_SH, :], axis=-1)
    scale = half_width / 0.171  # body scale relative to the 1.75 m template
    starts = [kpts[..., i, :] for i, _, _ in BONES] + [hips]
    ends = [kpts[..., j, :] for _, j, _ in BONES] + [shoulders]
    radii = [r * scale for _, _, r in BONES]
    frac = (np.arange(SUBSEGMENTS) + 0.5) / SUBSEGMENTS
    seg_start = np.stack(starts, axis=-2)  # (..., B, 3)
    seg = np.stack(ends, axis=-2) - seg_start
    centre = seg_start[..., None, :] + frac[:, None] * seg[..., None, :]  # (..., B, S, 3)
    length = np.linalg.norm(seg, axis=-1)  # (..., B)
    axis = seg / np.maximum(length[..., None], 1e-9)
    lead = kpts.shape[:-2]
    n_b = len(BONES) + 1
    a = np.stack(radii + [half_width], axis=-1)  # (..., B)
    b = np.stack(radii + [TORSO_DEPTH * half_width], axis=-1)

    def per_element(v: np.ndarray) -> np.ndarray:  # (..., B[, 3]) -> (..., B*S[, 3])
        extra = v.shape[len(lead) + 1:]
        v = np.broadcast_to(np.expand_dims(v, len(lead) + 1), (*lead, n_b, SUBSEGMENTS, *extra))
        return v.reshape(*lead, n_b * SUBSEGMENTS, *extra)

    def with_head(v: np.ndarray, head: np.ndarray) -> np.ndarray:  # head: (...[, 3])
        return np.concatenate([v, np.expand_dims(head, len(lead))], axis=len(lead))

    head_r = HEAD_RADIUS * scale
    limb = np.zeros((*lead, N_ELEMENTS), bool)
    limb[..., SUBSEGMENTS:SUBSEGMENTS * len(BONES)] = True  # arms and legs, not neck/torso/head
    vertical = np.broadcast_to(np.array([0.0, 0.0, 1.0]), (*lead, 3))
    return {
        "centre": with_head(centre.reshape(*lead, n_b * SUBSEGMENTS, 3), kpts[..., _HEAD, :]),
        "axis": with_head(per_element(axis), vertical),
        "length": with_head(per_element(length / SUBSEGMENTS), np.zeros(lead)),
        "a": with_head(per_element(a), head_r),
        "b": with_head(per_element(b), head_r),
        "lat": np.broadcast_to(lat[..., None, :], (*lead, N_ELEMENTS, 3)),
        "fwd": np.broadcast_to(fwd[..., None, :], (*lead, N_ELEMENTS, 3)),
        "limb": limb,
    }


def scatter(el: dict[str, np.ndarray], tx: np.ndarray, ants: np.ndarray,
            k0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per element ``(..., N)`` and antenna ``(A, 3)``: real amplitude ``(..., A, N)``,
    path length ``(..., A, N)`` (metres, via the specular point) and the specular points
    ``(..., A, N, 3)``, at wavenumber ``k0`` for the aspect patterns."""
    c = el["centre"]
    v1 = tx - c  # (..., N, 3)
    d1 = np.linalg.norm(v1, axis=-1)
    u1 = v1 / d1[..., None]
    v2 = ants[:, None, :] - c[..., None, :, :]  # (..., A, N, 3)
    d2 = np.linalg.norm(v2, axis=-1)
    u2 = v2 / d2[..., None]
    both = u1[..., None, :, :] + u2  # (..., A, N, 3) = 2 x bisector
    cos_half = 0.5 * np.linalg.norm(both, axis=-1)
    ax = el["axis"][..., None, :, :]
    g = (both * ax).sum(-1)
    length = el["length"][..., None, :]
    along = np.sinc(k0 * g * length / (2 * np.pi))  # np.sinc(x) = sin(pi x)/(pi x)
    # the bisector across the element's axis, in its cross-section frame
    across = both - g[..., None] * ax
    hu = (across * el["lat"][..., None, :, :]).sum(-1)
    hf = (across * el["fwd"][..., None, :, :]).sum(-1)
    norm = np.hypot(hu, hf)
    edge_on = norm < 1e-9  # bisector along the axis: any side faces it, take the front
    hu = np.where(edge_on, 0.0, hu / np.where(edge_on, 1.0, norm))
    hf = np.where(edge_on, 1.0, hf / np.where(edge_on, 1.0, norm))
    a, b = el["a"][..., None, :], el["b"][..., None, :]
    s = np.sqrt((a * hu) ** 2 + (b * hf) ** 2)
    radius = (a * b) ** 2 / s ** 3
    offset = ((a ** 2 * hu / s)[..., None] * el["lat"][..., None, :, :]
              + (b ** 2 * hf / s)[..., None] * el["fwd"][..., None, :, :])
    point = c[..., None, :, :] + offset
    path = d1[..., None, :] + d2 - (offset * both).sum(-1)
    cylinder = length * np.sqrt(k0 * radius * cos_half / (4 * np.pi)) * along
    sphere = 0.5 * a  # sqrt(pi r^2 / 4 pi)
    amp = GAMMA * np.where(length > 0, cylinder, sphere) / (d1[..., None, :] * d2)
    return amp, path, point


def blockers(kpts: np.ndarray) -> dict[str, np.ndarray]:
    """Whole-body blockers ``(..., ·)`` of skeletons ``(..., 14, 3)``: elliptic cylinders."""
    lat, fwd = body_frame(kpts)
    half_width = 0.45 * np.linalg.norm(kpts[..., _L_SH, :] - kpts[..., _R_SH, :], axis=-1)
    hips = 0.5 * (kpts[..., _R_HIP, :] + kpts[..., _L_HIP, :])
    return {"centre": hips, "lat": lat, "fwd": fwd, "a": BLOCKER_WIDTH * half_width,
            "b": BLOCKER_WIDTH * TORSO_DEPTH * half_width, "z_lo": np.zeros_like(half_width),
            "z_hi": kpts[..., _HEAD, 2] + HEAD_RADIUS}


def torso_blockers(kpts: np.ndarray) -> dict[str, np.ndarray]:
    """The torso alone (hips to shoulders), which hides a person's own far limbs."""
    lat, fwd = body_frame(kpts)
    half_width = 0.45 * np.linalg.norm(kpts[..., _L_SH, :] - kpts[..., _R_SH, :], axis=-1)
    hips = 0.5 * (kpts[..., _R_HIP, :] + kpts[..., _L_HIP, :])
    shoulders = 0.5 * (kpts[..., _R_SH, :] + kpts[..., _L_SH, :])
    return {"centre": hips, "lat": lat, "fwd": fwd, "a": 0.8 * half_width,
            "b": 0.8 * TORSO_DEPTH * half_width, "z_lo": hips[..., 2], "z_hi": shoulders[..., 2]}


def transmission(start: np.ndarray, end: np.ndarray, blk: dict[str, np.ndarray]) -> np.ndarray:
    """Amplitude factor of rays ``start -> end`` (broadcastable ``(..., 3)``) through blockers
    whose fields broadcast against them: 1 in the clear, ``10^(-BODY_LOSS_DB/20)`` through."""
    sx, sy, sz = start[..., 0], start[..., 1], start[..., 2]
    dx, dy, dz = end[..., 0] - sx, end[..., 1] - sy, end[..., 2] - sz
    rx, ry = sx - blk["centre"][..., 0], sy - blk["centre"][..., 1]
    lx, ly = blk["lat"][..., 0], blk["lat"][..., 1]  # forward is (-ly, lx)
    # into the blocker's frame, scaled so that its cross-section is the unit circle
    pu, pf = (rx * lx + ry * ly) / blk["a"], (ry * lx - rx * ly) / blk["b"]
    qu, qf = (dx * lx + dy * ly) / blk["a"], (dy * lx - dx * ly) / blk["b"]
    t = np.clip(-(pu * qu + pf * qf) / np.maximum(qu * qu + qf * qf, 1e-12), 0.0, 1.0)
    dist = np.hypot(pu + t * qu, pf + t * qf)
    z = sz + t * dz
    inside = (z > blk["z_lo"]) & (z < blk["z_hi"])
    return 1 - (1 - 10 ** (-BODY_LOSS_DB / 20)) * inside / (1 + np.exp((dist - 1) / SHADOW_EDGE))
