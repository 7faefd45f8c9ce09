//! `--lanes` and `--tree-lanes`: a fixed count, or `auto` with optional bounds,
//! `auto:MIN-MAX`.

use xfer::AdaptConfig;

/// What `--lanes` or `--tree-lanes` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LanesArg {
    /// Chosen from what the transfer measures, kept within `min..=max` when given, else
    /// within the defaults of what it counts (one file's lanes, a tree's budget).
    Auto {
        bounds: Option<(usize, usize)>,
    },
    Fixed(usize),
}

/// The most lanes `--lanes` accepts, fixed or as a bound.
pub const MAX_LANES: usize = 1024;

pub fn lanes_arg(s: &str) -> Result<LanesArg, String> {
    let s = s.trim();
    let count = |v: &str, what: &str| -> Result<usize, String> {
        let n: usize = v
            .trim()
            .parse()
            .map_err(|_| format!("{what} {v:?} is not a whole number"))?;
        if !(1..=MAX_LANES).contains(&n) {
            return Err(format!("{what} {n} is outside 1..={MAX_LANES}"));
        }
        Ok(n)
    };
    let Some(rest) = s.strip_prefix("auto") else {
        return count(s, "lane count").map(LanesArg::Fixed);
    };
    if rest.is_empty() {
        return Ok(LanesArg::Auto { bounds: None });
    }
    let bounds = rest
        .strip_prefix(':')
        .ok_or_else(|| format!("{s:?}: expected auto, auto:MIN-MAX or a number"))?;
    let (lo, hi) = bounds
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: bounds are written MIN-MAX, e.g. auto:4-64"))?;
    let (min, max) = (count(lo, "lower bound")?, count(hi, "upper bound")?);
    if min > max {
        return Err(format!("{s:?}: the lower bound exceeds the upper"));
    }
    Ok(LanesArg::Auto {
        bounds: Some((min, max)),
    })
}

impl LanesArg {
    /// The controller's configuration: `default` with the bounds given, if any.
    pub fn adapt_config(self, default: AdaptConfig) -> Option<AdaptConfig> {
        match self {
            LanesArg::Auto { bounds } => {
                let (min_lanes, max_lanes) =
                    bounds.unwrap_or((default.min_lanes, default.max_lanes));
                Some(AdaptConfig {
                    min_lanes,
                    max_lanes,
                    ..default
                })
            }
            LanesArg::Fixed(_) => None,
        }
    }

    pub fn fixed(self) -> Option<usize> {
        match self {
            LanesArg::Fixed(n) => Some(n),
            LanesArg::Auto { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(lanes_arg("16"), Ok(LanesArg::Fixed(16)));
        assert_eq!(lanes_arg("auto"), Ok(LanesArg::Auto { bounds: None }));
        assert_eq!(
            lanes_arg("auto:4-32"),
            Ok(LanesArg::Auto {
                bounds: Some((4, 32))
            })
        );
        assert_eq!(
            lanes_arg(" auto:8-8 "),
            Ok(LanesArg::Auto {
                bounds: Some((8, 8))
            })
        );
        let c = lanes_arg("auto:4-32")
            .unwrap()
            .adapt_config(AdaptConfig::default())
            .unwrap();
        assert_eq!((c.min_lanes, c.max_lanes, c.start_lanes()), (4, 32, 8));
        let d = lanes_arg("auto")
            .unwrap()
            .adapt_config(AdaptConfig::default())
            .unwrap();
        assert_eq!((d.min_lanes, d.max_lanes), (2, 64));
        assert_eq!(lanes_arg("auto").unwrap().fixed(), None);
        assert_eq!(
            lanes_arg("5").unwrap().adapt_config(AdaptConfig::default()),
            None
        );
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        for (bad, says) in [
            ("0", "outside"),
            ("-3", "whole number"),
            ("auto:32-4", "exceeds"),
            ("auto:4", "MIN-MAX"),
            ("auto4-8", "expected auto"),
            ("auto:0-8", "outside"),
            ("auto:4-99999", "outside"),
            ("many", "whole number"),
        ] {
            let e = lanes_arg(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
