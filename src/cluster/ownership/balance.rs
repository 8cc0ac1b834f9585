//! Which live nodes should own each partition: a pure function of the live node names, the
//! partition count and the replica count, so every node that sees the same live set computes
//! the same answer without talking to the others.
//!
//! Each partition ranks the nodes by a rendezvous hash of (node, partition) and starts from
//! its top `R`. That alone moves little when a node comes or goes, but it is uneven (with 16
//! partitions on 3 nodes one node often gets 13 of 32 replicas and another 8), so a second
//! step evens the load: while the busiest node has two or more replicas more than the least
//! busy one, one partition moves from the first to the second, the one whose rank suffers
//! least. Each move lowers the sum of squared loads, so this ends, with every load within
//! one of the others.

/// The desired owners of every partition (index = partition), each list in rank order.
/// Every partition gets `min(replicas, live.len())` distinct nodes; no partition gets any when
/// no node is live. `live` may be in any order.
pub(super) fn desired_owners(live: &[String], partitions: u32, replicas: u32) -> Vec<Vec<String>> {
    let mut nodes: Vec<&str> = live.iter().map(String::as_str).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let per_partition = (replicas as usize).min(nodes.len());
    if per_partition == 0 {
        return vec![Vec::new(); partitions as usize];
    }

    // rank[p][n]: the place of node n in partition p's preference (0 = first).
    let rank: Vec<Vec<usize>> = (0..partitions)
        .map(|p| {
            let mut order: Vec<usize> = (0..nodes.len()).collect();
            order.sort_by_key(|&n| (std::cmp::Reverse(score(nodes[n], p)), n));
            let mut rank = vec![0; nodes.len()];
            for (place, n) in order.into_iter().enumerate() {
                rank[n] = place;
            }
            rank
        })
        .collect();

    // owners[p]: node indices; first the top of each ranking.
    let mut owners: Vec<Vec<usize>> = rank
        .iter()
        .map(|rank| {
            let mut top: Vec<usize> = (0..nodes.len()).collect();
            top.sort_by_key(|&n| rank[n]);
            top.truncate(per_partition);
            top
        })
        .collect();
    let mut load = vec![0usize; nodes.len()];
    for &n in owners.iter().flatten() {
        load[n] += 1;
    }

    loop {
        // The busiest and the least busy node, the first by name among equals.
        let busiest = (0..nodes.len())
            .max_by_key(|&n| (load[n], std::cmp::Reverse(n)))
            .expect("at least one node");
        let idlest = (0..nodes.len())
            .min_by_key(|&n| (load[n], n))
            .expect("at least one node");
        if load[busiest] <= load[idlest] + 1 {
            break;
        }
        // The busiest holds more partitions than the idlest, so one of them lacks the idlest.
        let (partition, _) = owners
            .iter()
            .enumerate()
            .filter(|(_, o)| o.contains(&busiest) && !o.contains(&idlest))
            .map(|(p, _)| (p, rank[p][idlest] as isize - rank[p][busiest] as isize))
            .min_by_key(|&(p, cost)| (cost, p))
            .expect("the busiest node holds a partition the idlest does not");
        let slot = owners[partition]
            .iter()
            .position(|&n| n == busiest)
            .expect("chosen for holding it");
        owners[partition][slot] = idlest;
        owners[partition].sort_by_key(|&n| rank[partition][n]);
        load[busiest] -= 1;
        load[idlest] += 1;
    }

    owners
        .into_iter()
        .map(|o| o.into_iter().map(|n| nodes[n].to_string()).collect())
        .collect()
}

/// The rendezvous score of `node` for `partition`: FNV-1a (64 bit) of the name, mixed with
/// the partition by SplitMix64's finalizer. Fixed here rather than taken from a hashing crate,
/// whose output may change between versions: nodes of two tierdb versions must still agree.
pub(super) fn score(node: &str, partition: u32) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut x = hash ^ u64::from(partition).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
