//! Shared server/client pieces (filled in below).
