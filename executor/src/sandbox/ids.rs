//! The user and group ids tasks run as: a range the executor is given (as systemd's `DynamicUser`
//! draws from its own), from which each running task takes a user id of its own and gives it back
//! when it ends, and in which each job has a group id, the same on every node, shared by its tasks
//! so that all of them may write the job's checkpoint folder.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// An inclusive range of ids, `first-last` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub first: u32,
    pub last: u32,
}

impl IdRange {
    /// Ids past systemd's and the distributions' (users below 60,000, subordinate ids for user
    /// namespaces from 100,000 in blocks of 65,536), and below 2³¹ (some tools take ids as signed).
    pub const DEFAULT: IdRange = IdRange {
        first: 1_000_000_000,
        last: 1_000_065_535,
    };

    pub fn count(self) -> u64 {
        u64::from(self.last) - u64::from(self.first) + 1
    }

    /// The group of job `job_id`: a hash of the id into the range, so every executor (and every
    /// generation) gives the job's tasks the same group. Two jobs may share a group: a group only
    /// opens what a task's sandbox shows it, and each shows only its own job's folders.
    pub fn group_of(self, job_id: &str) -> u32 {
        // FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in job_id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.first + u32::try_from(hash % self.count()).unwrap_or(0)
    }
}

impl fmt::Display for IdRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl FromStr for IdRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("`{text}`: expected FIRST-LAST, e.g. {}", Self::DEFAULT))?;
        let parse = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{text}`: `{part}` is not an id"))
        };
        let (first, last) = (parse(first)?, parse(last)?);
        if first == 0 || first > last {
            return Err(format!(
                "`{text}`: the range must start above 0 (root) and not end before it starts"
            ));
        }
        if last >= 1 << 31 {
            return Err(format!("`{text}`: ids must stay below 2147483648"));
        }
        if u64::from(last - first) + 1 < 64 {
            return Err(format!(
                "`{text}`: at least 64 ids, one per task running at once"
            ));
        }
        Ok(IdRange { first, last })
    }
}

/// The user ids of running tasks, taken from a range: the lowest free one for each new task.
#[derive(Debug)]
pub struct IdPool {
    range: IdRange,
    taken: BTreeSet<u32>,
}

impl IdPool {
    pub fn new(range: IdRange) -> Self {
        IdPool {
            range,
            taken: BTreeSet::new(),
        }
    }

    /// A user id no running task of this executor has; `None` when the range is used up.
    pub fn take(&mut self) -> Option<u32> {
        let mut candidate = self.range.first;
        for &taken in &self.taken {
            if taken != candidate {
                break;
            }
            candidate = candidate.checked_add(1)?;
        }
        (candidate <= self.range.last).then(|| {
            self.taken.insert(candidate);
            candidate
        })
    }

    pub fn give_back(&mut self, id: u32) {
        self.taken.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_read_and_refused_with_the_reason() {
        assert_eq!(
            "100000-100099".parse::<IdRange>(),
            Ok(IdRange {
                first: 100_000,
                last: 100_099
            })
        );
        for (bad, why) in [
            ("100000", "FIRST-LAST"),
            ("0-100", "above 0"),
            ("200-100", "not end before"),
            ("1-10", "at least 64"),
            ("2147483000-2147483700", "below 2147483648"),
            ("a-b", "not an id"),
        ] {
            let err = bad.parse::<IdRange>().unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn each_running_task_has_its_own_user_and_a_freed_one_is_reused() {
        let mut pool = IdPool::new(IdRange {
            first: 5000,
            last: 5002,
        });
        assert_eq!(pool.take(), Some(5000));
        assert_eq!(pool.take(), Some(5001));
        assert_eq!(pool.take(), Some(5002));
        assert_eq!(pool.take(), None, "the range is used up");
        pool.give_back(5001);
        assert_eq!(pool.take(), Some(5001));
    }

    #[test]
    fn a_jobs_group_is_the_same_everywhere_and_inside_the_range() {
        let range = IdRange::DEFAULT;
        let job = "01a216f3-7026-74c3-9fc5-1d565169ed78";
        assert_eq!(range.group_of(job), range.group_of(job));
        let groups: BTreeSet<u32> = (0..200)
            .map(|i| range.group_of(&format!("job-{i}")))
            .collect();
        assert!(
            groups
                .iter()
                .all(|g| (range.first..=range.last).contains(g))
        );
        assert!(groups.len() > 190, "jobs spread over the range");
    }
}
