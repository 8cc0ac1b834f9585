use super::{creates_database, statements};

#[test]
fn statements_split_on_semicolons_outside_quotes() {
    assert_eq!(
        statements(r#"CREATE DATABASE "a;b"; create database c ;"#),
        vec![r#"CREATE DATABASE "a;b""#, "create database c"]
    );
    assert_eq!(
        statements(r#"CREATE DATABASE "x\";y""#),
        vec![r#"CREATE DATABASE "x\";y""#]
    );
    assert!(statements(" ; ").is_empty());
}

#[test]
fn only_create_database_with_a_name_is_taken() {
    // Telegraf's statement (plugins/outputs/influxdb/http.go), and the forms users type.
    for taken in [
        r#"CREATE DATABASE "telegraf""#,
        "create database metrics",
        "CREATE DATABASE m WITH DURATION 30d",
    ] {
        assert!(creates_database(taken), "{taken}");
    }
    for refused in [
        "CREATE DATABASE",
        "SHOW DATABASES",
        "DROP DATABASE telegraf",
        "SELECT * FROM cpu",
        "CREATE RETENTION POLICY rp ON db DURATION 1d REPLICATION 1",
    ] {
        assert!(!creates_database(refused), "{refused}");
    }
}
