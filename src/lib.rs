//! timewheel
