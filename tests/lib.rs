//! Shared helpers for the integration tests (filled by the tests).
