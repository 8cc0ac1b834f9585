use super::*;

fn converted() -> Vec<Converted> {
    let at = |tier, bucket| CellAt {
        tier,
        period_start: 1_763_683_200,
        chunk: 3,
        bucket,
        slot: 17,
    };
    let bucket = Bucket {
        count: 2,
        total: -0.0,
        min: f64::NEG_INFINITY,
        max: 1e308,
        last: Some(Last::new(0.1, 1_763_683_290)),
    };
    vec![
        Converted {
            id: SeriesId(785),
            cells: vec![(at(0, 4), bucket), (at(2, 0), Bucket::EMPTY)],
            latest: Some((1_763_683_290, 0.1)),
        },
        Converted {
            id: SeriesId(7),
            cells: Vec::new(),
            latest: None,
        },
    ]
}

/// What a parse gives back, comparable (floats by their bits).
fn image(group: &[Converted]) -> Vec<String> {
    (group.iter())
        .map(|c| {
            format!(
                "{} {:?} {:?}",
                c.id.0,
                c.latest.map(|(t, v)| (t, v.to_bits())),
                c.cells
            )
        })
        .collect()
}

#[test]
fn an_intent_round_trips_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    write_intent(dir.path(), 42, SeriesKind::Counter, &converted()).unwrap();
    let path = dir.path().join(RETYPE_INTENT);
    let text = std::fs::read_to_string(&path).unwrap();
    let (layout, kind, group) = parse_intent(&path, &text).unwrap();
    assert_eq!((layout, kind), (42, SeriesKind::Counter));
    assert_eq!(image(&group), image(&converted()));
    assert!(!crate::storage::disk::temp_path(&path).exists());
}

#[test]
fn a_cut_or_foreign_intent_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_intent(dir.path(), 42, SeriesKind::Gauge, &converted()).unwrap();
    let path = dir.path().join(RETYPE_INTENT);
    let text = std::fs::read_to_string(&path).unwrap();
    let cut = &text[..text.len() - "end\n".len()];
    for bad in [cut, "hello\n", &text.replace("cell 0", "cell x")] {
        let err = parse_intent(&path, bad).err().unwrap().to_string();
        assert!(err.contains("RETYPING"), "{err}");
    }
}
