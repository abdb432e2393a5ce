"""Person-in-WiFi 3D CSI: the sample format, its loader and its preprocessing.

One sample (Yan et al., Person-in-WiFi 3D, CVPR 2024; code ``aiotgroup/Person-in-WiFi-3D-repo``)
is a complex CSI array of shape ``(3, 3, 30, 20)``: receivers x antennas x subcarriers x packets,
stored as ``csi/<name>.mat`` (variable ``csi_out``; MATLAB v5 or v7.3/HDF5), and its labels
``keypoint/<name>.npy``: ``(N, 14, 3)`` keypoints of N persons in metres.

Preprocessing, after Person-in-WiFi 3D's:

- amplitude: wavelet denoising (``db11``, ``pywt.wavedec`` / ``pywt.waverec``) along the packets,
  soft-thresholding the detail coefficients at the universal threshold (Donoho & Johnstone 1994,
  noise level from the median absolute deviation of the finest details);
- phase: per packet, unwrap across subcarriers and remove the least-squares line
  ``a * k + b`` over the subcarrier indices ``k`` (the linear slope from the sampling time offset
  and the constant from the carrier frequency/phase offset; Sen et al., MobiSys 2012). The line
  is fitted to a receiver's first antenna and removed from all three (the offsets are common to
  them), so the phase differences between antennas, which carry the sign of the body's Doppler
  shift, survive [ours; a line fitted to each antenna alone erases body yaw:
  benchmarks/README.md, wifi_observability.py].
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from edgekit.errors import UsageError

N_RX, N_ANT, N_SUB, N_PKT = 3, 3, 30, 20
N_KPT = 14
CSI_SHAPE = (N_RX, N_ANT, N_SUB, N_PKT)
CENTER_FREQ_HZ = 5.64e9  # channel 128, the Person-in-WiFi 3D band
SUBCARRIER_SPACING_HZ = 312.5e3
# Intel 5300 reports 30 of the 114 subcarriers of a 40 MHz channel, every fourth one
# (Halperin et al., Linux 802.11n CSI Tool).
SUBCARRIER_INDEX = np.array([*range(-58, -1, 4), *range(2, 59, 4)], dtype=np.float64)
SUBCARRIER_FREQ_HZ = CENTER_FREQ_HZ + SUBCARRIER_SPACING_HZ * SUBCARRIER_INDEX
# [ours] keypoint order (the dataset's readers disagree on names; 14 LSP-like joints)
JOINT_NAMES = ("head", "neck", "r_shoulder", "r_elbow", "r_wrist", "l_shoulder", "l_elbow",
               "l_wrist", "r_hip", "r_knee", "r_ankle", "l_hip", "l_knee", "l_ankle")


# ---------------------------------------------------------------------------------- loading
def load_csi(path: str | Path) -> np.ndarray:
    """A complex128 ``(3, 3, 30, 20)`` array from a ``.mat`` (v5 or v7.3) or ``.npy`` file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"CSI file {path} does not exist")
    if path.suffix == ".npy":
        csi = np.load(path, allow_pickle=False)
    elif path.suffix == ".mat":
        csi = _load_mat(path)
    else:
        raise UsageError(f"{path}: unknown CSI file type", hint="give a .mat or .npy file")
    csi = np.asarray(csi)
    if csi.shape != CSI_SHAPE or not np.iscomplexobj(csi):
        raise UsageError(f"{path}: CSI has shape {csi.shape} dtype {csi.dtype}, expected "
                         f"complex {CSI_SHAPE} (receivers, antennas, subcarriers, packets)")
    return csi.astype(np.complex128)


def _load_mat(path: Path) -> np.ndarray:
    from scipy.io import loadmat

    if _is_hdf5(path):  # MATLAB v7.3 (or a plain HDF5 file with the same layout)
        return _load_mat73(path)
    try:
        mat = loadmat(path)
    except (ValueError, NotImplementedError) as exc:
        raise UsageError(f"{path}: not a readable .mat file ({exc})") from exc
    if "csi_out" not in mat:
        raise UsageError(f"{path}: no variable 'csi_out'")
    return mat["csi_out"]


def _is_hdf5(path: Path) -> bool:
    """HDF5's signature sits at offset 0, or 512, 1024, ... behind a user block (MATLAB: 512)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    return any(head[o:o + 8] == b"\x89HDF\r\n\x1a\n" for o in (0, 512, 1024, 2048))


def _load_mat73(path: Path) -> np.ndarray:
    try:
        import h5py
    except ImportError as exc:
        from edgekit.errors import MissingDependencyError
        raise MissingDependencyError(f"{path} is a MATLAB v7.3 file, which needs h5py",
                                     hint="pip install h5py") from exc
    with h5py.File(path, "r") as f:
        if "csi_out" not in f:
            raise UsageError(f"{path}: no variable 'csi_out'")
        raw = f["csi_out"][()]
    # HDF5 stores MATLAB's column-major array reversed, as a (real, imag) compound.
    return (raw["real"] + 1j * raw["imag"]).transpose(3, 2, 1, 0)


def load_keypoints(path: str | Path) -> np.ndarray:
    """``(N, 14, 3)`` float32 keypoints in metres from a ``.npy`` file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"keypoint file {path} does not exist")
    kpts = np.load(path, allow_pickle=False)
    if kpts.ndim == 2:
        kpts = kpts[None]
    if kpts.ndim != 3 or kpts.shape[1:] != (N_KPT, 3):
        raise UsageError(f"{path}: keypoints have shape {kpts.shape}, expected (N, {N_KPT}, 3)")
    return kpts.astype(np.float32)


def load_sample(root: str | Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``root/csi/<name>.mat`` and ``root/keypoint/<name>.npy`` -> (csi, keypoints)."""
    root = Path(root)
    return load_csi(root / "csi" / f"{name}.mat"), load_keypoints(root / "keypoint" / f"{name}.npy")


# ---------------------------------------------------------------------------- preprocessing
def denoise_amplitude(amp: np.ndarray, wavelet: str = "db11", level: int = 1,
                      axis: int = -1) -> np.ndarray:
    """Wavelet-denoise ``amp`` along ``axis`` (packets): soft universal threshold on details.

    With 20 packets db11 (22 taps) admits one level; pywt warns that boundary effects reach every
    coefficient, which is expected here and silenced.
    """
    import pywt

    amp = np.asarray(amp, dtype=np.float64)
    n = amp.shape[axis]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coeffs = pywt.wavedec(amp, wavelet, level=level, axis=axis, mode="symmetric")
        finest = np.moveaxis(coeffs[-1], axis, -1)
        sigma = np.median(np.abs(finest), axis=-1, keepdims=True) / 0.6745
        thr = np.moveaxis(sigma * np.sqrt(2.0 * np.log(n)), -1, axis)
        coeffs = [coeffs[0]] + [pywt.threshold(c, thr, mode="soft") for c in coeffs[1:]]
        out = pywt.waverec(coeffs, wavelet, axis=axis, mode="symmetric")
    return np.take(out, np.arange(n), axis=axis)  # waverec may return one sample more


def sanitize_phase(phase: np.ndarray, subcarrier_index: np.ndarray = SUBCARRIER_INDEX,
                   axis: int = -2) -> np.ndarray:
    """Unwrap across subcarriers (``axis``) and remove the least-squares line a*k + b per packet."""
    phase = np.moveaxis(np.unwrap(np.asarray(phase, dtype=np.float64), axis=axis), axis, -1)
    k = np.asarray(subcarrier_index, dtype=np.float64)
    design = np.stack([k, np.ones_like(k)], axis=1)  # (S, 2)
    # Projection onto the orthogonal complement of span{k, 1}: exact removal of any a*k + b.
    residual_maker = np.eye(len(k)) - design @ np.linalg.pinv(design)
    return np.moveaxis(phase @ residual_maker.T, -1, axis)


def sanitize_phase_per_receiver(phase: np.ndarray,
                                subcarrier_index: np.ndarray = SUBCARRIER_INDEX) -> np.ndarray:
    """Phase ``(..., antennas, subcarriers, packets)`` with the first antenna's sanitising line
    removed from every antenna of the receiver, so the phase differences between antennas survive.

    Carrier frequency and sampling time offsets are common to a receiver's antennas (one
    oscillator, one ADC clock), which is why conjugate multiplication and the CSI ratio between
    antennas cancel them [Li et al., IndoTrack, UbiComp 2017; Zeng et al., FarSense, MobiCom 2019].
    Per-antenna sanitisation (``sanitize_phase``) also removes the constant phase of every
    antenna, and with it the rotation of the body's paths across packets whose sign is the sign of
    their Doppler shift (benchmarks/README.md, wifi_observability.py). The first antenna comes out
    as ``sanitize_phase`` leaves it; each other antenna is shifted by a whole number of turns so
    that its mean over subcarriers lies in (-pi, pi].
    """
    phase = np.unwrap(np.asarray(phase, dtype=np.float64), axis=-2)
    k = np.asarray(subcarrier_index, dtype=np.float64)
    design = np.stack([k, np.ones_like(k)], axis=1)  # (S, 2)
    line = design @ (np.linalg.pinv(design) @ phase[..., :1, :, :])  # (..., 1, S, P)
    out = phase - line
    turns = np.round(out.mean(axis=-2, keepdims=True) / (2 * np.pi))
    return out - 2 * np.pi * turns


def preprocess(csi: np.ndarray, per_receiver_phase: bool = True) -> np.ndarray:
    """Complex CSI ``(..., 3, 3, 30, P)`` -> float32 ``(..., 2, 270, P)``: [amplitude, phase].

    Amplitude is wavelet-denoised and divided by its mean over the sample (receiver gains and AGC
    differ between captures); phase is sanitised per receiver (``sanitize_phase_per_receiver``),
    or per antenna as before with ``per_receiver_phase=False`` (which loses the sign of the
    Doppler shift; kept to show that). Antenna pairs and subcarriers are flattened into 270
    features per packet, the sequence the SSM scans over.
    """
    csi = np.asarray(csi)
    lead = csi.shape[:-4]
    amp = denoise_amplitude(np.abs(csi), axis=-1)
    amp = amp / np.maximum(amp.mean(axis=(-4, -3, -2, -1), keepdims=True), 1e-12)
    if per_receiver_phase:
        phase = sanitize_phase_per_receiver(np.angle(csi))
    else:
        phase = sanitize_phase(np.angle(csi), axis=-2)
    feats = np.stack([amp, phase], axis=-5)  # (..., 2, 3, 3, 30, P)
    return feats.reshape(*lead, 2, N_RX * N_ANT * N_SUB, csi.shape[-1]).astype(np.float32)
