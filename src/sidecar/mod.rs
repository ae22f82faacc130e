//! The sidecar protocol (placeholder).
