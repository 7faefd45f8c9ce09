//! How a client's lanes map onto connections: M connections × K streams each.
//!
//! One type for every transport, set in one place ([`LaneLayout`] in each client
//! configuration, filled from the command line's `--connections` and `--streams`), so the
//! layout cannot be set for one protocol and forgotten for another.

use crate::error::ConfigError;

/// The layout asked for; `None` takes the protocol's default.
///
/// | protocol | default M × K | lanes |
/// |---|---|---|
/// | HTTP/1.1 | 8 × 1 (one request at a time per connection; K is ignored) | 8 |
/// | HTTP/2 | 1 × 8 | 8 |
/// | QUIC | 2 × 4 | 8 |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneLayout {
    /// Connections, M.
    pub connections: Option<usize>,
    /// Requests in flight per connection, K (HTTP/2 and QUIC streams).
    pub streams_per_connection: Option<usize>,
}

/// A layout with every number decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    pub connections: usize,
    pub streams_per_connection: usize,
}

impl Lanes {
    pub const fn new(connections: usize, streams_per_connection: usize) -> Self {
        Self {
            connections,
            streams_per_connection,
        }
    }

    /// Lanes in all: M × K.
    pub fn count(self) -> usize {
        self.connections.max(1) * self.streams_per_connection.max(1)
    }

    /// The connection lane `lane` rides on: lanes 0..K on the first, K..2K on the second, and
    /// so on, wrapping after M × K.
    pub fn connection_of(self, lane: usize) -> usize {
        (lane / self.streams_per_connection.max(1)) % self.connections.max(1)
    }

    /// Which of its connection's K stream slots lane `lane` takes.
    pub fn slot_of(self, lane: usize) -> usize {
        lane % self.streams_per_connection.max(1)
    }
}

impl LaneLayout {
    /// The layout with the protocol's defaults filled in.
    pub fn resolve(self, default: Lanes) -> Lanes {
        Lanes {
            connections: self.connections.unwrap_or(default.connections),
            streams_per_connection: self
                .streams_per_connection
                .unwrap_or(default.streams_per_connection),
        }
    }

    /// Refuse counts outside `1..=max_connections` and `1..=max_streams`, naming the field.
    pub fn validate(
        self,
        max_connections: usize,
        max_streams: usize,
        allowed_connections: &'static str,
        allowed_streams: &'static str,
    ) -> Result<(), ConfigError> {
        if let Some(m) = self.connections {
            if !(1..=max_connections).contains(&m) {
                return Err(ConfigError::new("connections", m, allowed_connections));
            }
        }
        if let Some(k) = self.streams_per_connection {
            if !(1..=max_streams).contains(&k) {
                return Err(ConfigError::new(
                    "streams_per_connection",
                    k,
                    allowed_streams,
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_is_not_asked() {
        let asked = LaneLayout {
            connections: Some(3),
            streams_per_connection: None,
        };
        assert_eq!(asked.resolve(Lanes::new(1, 8)), Lanes::new(3, 8));
        assert_eq!(LaneLayout::default().resolve(Lanes::new(2, 4)).count(), 8);
    }

    #[test]
    fn lanes_fill_one_connection_after_another() {
        let l = Lanes::new(2, 3);
        let on: Vec<(usize, usize)> = (0..l.count() + 1)
            .map(|i| (l.connection_of(i), l.slot_of(i)))
            .collect();
        assert_eq!(on, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 0)]);
    }

    #[test]
    fn zero_and_huge_counts_are_refused() {
        let zero = LaneLayout {
            connections: Some(0),
            streams_per_connection: None,
        };
        let e = zero.validate(64, 1024, "1 to 64", "1 to 1024").unwrap_err();
        assert_eq!(e.field, "connections");
        let huge = LaneLayout {
            connections: None,
            streams_per_connection: Some(5000),
        };
        let e = huge.validate(64, 1024, "1 to 64", "1 to 1024").unwrap_err();
        assert_eq!(e.field, "streams_per_connection");
    }
}
