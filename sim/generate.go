package sim

//go:generate sh -c "cd .. && mkdir -p docs/img && go run ./sim/gendocs"
