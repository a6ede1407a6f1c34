//! Medians with their spread, as every figure here is quoted: the machines are shared
//! and noisy, so one run says little.

use serde::Serialize;

/// The runs of one figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: Vec<f64>,
}

impl Summary {
    /// `None` without any run (NaN is not a figure: such runs are left out).
    pub fn of(runs: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = runs.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            runs: runs.to_vec(),
        })
    }
}

/// `a / b` of two medians, when `b` is not zero.
pub fn ratio(a: &Summary, b: &Summary) -> Option<f64> {
    (b.median != 0.0).then(|| a.median / b.median)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn median_min_max() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.runs, vec![4.0, 1.0, 2.0, 3.0], "the runs as they came");
        assert!(Summary::of(&[]).is_none());
        assert_eq!(Summary::of(&[f64::NAN, 5.0]).unwrap().median, 5.0);
        let a = Summary::of(&[2.0]).unwrap();
        assert_eq!(ratio(&a, &Summary::of(&[4.0]).unwrap()), Some(0.5));
        assert_eq!(ratio(&a, &Summary::of(&[0.0]).unwrap()), None);
    }

    proptest! {
        #[test]
        fn the_median_lies_between_min_and_max(v in proptest::collection::vec(-1e9f64..1e9, 1..20)) {
            let s = Summary::of(&v).unwrap();
            prop_assert!(s.min <= s.median && s.median <= s.max);
            prop_assert_eq!(s.min, v.iter().copied().fold(f64::INFINITY, f64::min));
            let below = v.iter().filter(|&&x| x < s.median).count();
            prop_assert!(below <= v.len() / 2);
        }
    }
}
