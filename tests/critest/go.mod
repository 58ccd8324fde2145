module github.com/pullhelper/pullhelper/tests/critest

go 1.26.8

require sigs.k8s.io/cri-tools v1.37.0
