//! Memory-mapped files (placeholder).
#![allow(unsafe_code)]
